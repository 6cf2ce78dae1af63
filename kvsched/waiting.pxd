cimport cython
from kvsched.sequence cimport Seq

cpdef long long admission_tokens(Seq seq)

cdef class WaitingQueue:
    cdef public object _policy
    cdef public object _swapped
    cdef public list _stack, _heap
    cdef public object _fresh
    cdef public long long _entries, queued_tokens, size
    cdef public bint dynamic, ties_by_id

    @cython.locals(key=tuple)
    cpdef push(self, Seq seq, double enqueue_time)
    cpdef push_front(self, Seq seq)
    cpdef push_swapped(self, Seq seq)
    cpdef Seq peek(self)
    cpdef Seq second(self)
    @cython.locals(seq=Seq)
    cpdef Seq pop(self)
