cimport cython
from kvsched.sequence cimport Seq

cdef class NewTokenRatio:
    cdef public double init, min, decay, current

    @cython.locals(current=cython.double, decay=cython.double, floor=cython.double,
                   _=cython.longlong)
    cpdef decay_steps(self, long long k)

@cython.locals(total=cython.double, seq=Seq, clip=cython.longlong)
cpdef double reserved(list running, long long tick, double ratio)

cdef class FutureTokenReservation:
    cdef public NewTokenRatio ratio
    cdef public long long page, max_prefill_tokens
    cdef public object chunk_size, preemption_threshold
    cdef public bint batch_is_full, _held
    cdef public long long _decoding
    cdef public double _offset
    cdef public long long _charged, _pages, _rem_input
    cdef public object _rem_chunk
    cdef public long long _admitted, _in_batch
    cdef public set _prepared
    cdef public long long _refresh_calls

    cpdef bint refresh_due(self)
    cpdef long long _ceil(self, long long tokens)
    cpdef idle(self)
    cpdef _latch(self, bint full)
    @cython.locals(offset=cython.double, page=cython.longlong, charged=cython.longlong,
                   max_new=cython.longlong, seq=Seq)
    cpdef bint open_round(self, list running, long long tick, object continued,
                          long long waiting)
    cpdef object continue_limit(self, list running, long long tick, long long free_tokens)
    cpdef prepared(self, Seq seq)
    @cython.locals(max_new=cython.longlong, paged=cython.longlong, chunk=cython.longlong)
    cpdef object check(self, Seq seq, long long tokens, long long free_tokens)
    @cython.locals(page=cython.longlong, charged=cython.longlong, max_new=cython.longlong)
    cpdef bint admitted(self, Seq seq, long long tokens, long long chunk,
                        long long free_tokens)
    cpdef bint may_try(self, long long free_tokens)
    cpdef double _remaining_total(self, long long free_tokens)
    cpdef bint _capacity(self, long long free_tokens)
    cpdef close_round(self, bint slots_full, long long waiting)
    cpdef left_batch(self)
    cpdef after_passes(self, long long k)
    cpdef after_decode(self, bint retracted, object left)
