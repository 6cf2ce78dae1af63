cimport cython

cdef class ThrashMonitor:
    cdef public object config
    cdef public list _ring_r, _ring_g
    cdef public long long _size, _count, _total_r, _total_g, _window
    cdef public bint signal
    cdef public object _skipped
    cdef public double _threshold, _release

    @cython.locals(size=cython.longlong, count=cython.longlong, total_r=cython.longlong, total_g=cython.longlong, start=cython.longlong, window_r=cython.longlong, ratio=cython.double)
    cpdef double update(self, long long recomputed, long long generated)
    @cython.locals(last=cython.longlong, total_g=cython.longlong)
    cpdef skip(self, long long num_steps, long long generated)
