cimport cython

cdef class ArrivalQueue:
    cdef public object requests, times, _order
    cdef public long long _next, _k, _held
    cdef public list _chunk_times, _chunk_order, _chunk_requests, _released
    cdef public dict _waiters

    @cython.locals(k=cython.longlong, timed=cython.double)
    cpdef double next_time(self)
    @cython.locals(k=cython.longlong, i=cython.longlong)
    cpdef tuple pop(self)
