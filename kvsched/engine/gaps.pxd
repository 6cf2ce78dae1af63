cimport cython
from kvsched.histogram cimport GapHistogram
from kvsched.sequence cimport Seq

cdef class GapTracker:
    cdef public double last_end
    cdef public GapHistogram itl
    cdef public list _ticks, _gaps
    cdef public dict _wanted

    cpdef want(self, long long tick, Seq seq)
    @cython.locals(gap=cython.double, waiting=list, seq=Seq)
    cpdef complete(self, long long tick, double end, long long num_decodes=*)
    @cython.locals(end=cython.double, gap=cython.double, top=cython.double, low=cython.double, later_gap=cython.double, before=cython.double, here=cython.double, j=Py_ssize_t, ticks=list, gaps=list, later=list, waiting=list, seq=Seq, itl=GapHistogram)
    cpdef complete_many(self, long long first, list ends, long long k, long long num_decodes=*)
    @cython.locals(ticks=list, gaps=list)
    cpdef _push(self, long long tick, double gap)
