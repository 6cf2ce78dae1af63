cimport cython

cdef class Stretch:
    cdef public long long step, num_steps, num_decodes, num_running, num_waiting
    cdef public list starts, durations, blocks_used
    cdef public long long kv_first, num_finished
    cdef public list mfu, mbu, cached_blocks, evicted_blocks

cdef class Timeline:
    cdef public double start, end, width
    cdef public long long size
    cdef public object busy, waiting, count
    cdef double[::1] _busy
    cdef long long[::1] _waiting, _count

    cpdef long long _bucket(self, double time)
    @cython.locals(k=cython.longlong)
    cpdef add_row(self, double start, double duration, long long num_waiting)
    @cython.locals(starts=list, begin=cython.double, end=cython.double, width=cython.double, top=cython.longlong, first=cython.longlong)
    cpdef add_stretch(self, Stretch stretch)

cdef class StepStats:
    cdef public long long num_steps
    cdef public double end, busy_time
    cdef public long long prefill_tokens, decode_tokens, recomputed_tokens, swapped_blocks
    cdef public long long blocks_used_sum, peak_blocks_used
    cdef public double thrash_ratio_max
    cdef public long long backpressure_steps
    cdef public Timeline timeline
    cdef public bint has_utilisation
    cdef public double _mfu_sum, _mbu_sum
    cdef public long long evicted_blocks

    @cython.locals(values=tuple, start=cython.double, duration=cython.double, used=cython.longlong, prefill=cython.longlong, decoded=cython.longlong, recomputed=cython.longlong, swapped_out=cython.longlong, swapped_in=cython.longlong, ratio=cython.double, signal=cython.longlong, evicted=cython.longlong, mfu=object)
    cpdef add_row(self, object row)
    @cython.locals(total=cython.longlong, used=cython.longlong, evicted=cython.longlong)
    cpdef add_stretch(self, Stretch stretch)

cdef class CompactRows:
    cdef public object ints, floats
    cdef public long long size, num_blocks
    cdef public bint no_mfu
    cdef long long[:, ::1] _ints
    cdef double[:, ::1] _floats

    @cython.locals(values=tuple, i=Py_ssize_t, k=Py_ssize_t, ints=cython.longlong[:, ::1], floats=cython.double[:, ::1])
    cpdef add_row(self, object row)
    @cython.locals(i=Py_ssize_t, k=Py_ssize_t, ints=cython.longlong[:, ::1], floats=cython.double[:, ::1], times=list, duration=cython.double, step_mfu=list, step_mbu=list, flops=cython.double, bytes_moved=cython.double, each=cython.double, seconds=cython.double, evicted=cython.longlong, blocks=cython.longlong, decoded=cython.longlong, used=cython.longlong)
    cpdef add_stretch(self, Stretch stretch)

cdef class StepLog:
    cdef public long long num_blocks
    cdef public StepStats stats
    cdef public list kept
    cdef public object _sink
    cdef public list _chunk
    cdef public long long _limit
    cdef public CompactRows _compact

    @cython.locals(compact=CompactRows)
    cpdef row(self, object row)
    @cython.locals(compact=CompactRows)
    cpdef stretch(self, Stretch stretch)
