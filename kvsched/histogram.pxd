cimport cython

cdef extern from "math.h":
    double ceil(double x)
    double log(double x)

cdef class GapHistogram:
    cdef public long long count
    cdef public double total
    cdef public dict _exact, _buckets
    cdef public long long _max_exact
    cdef public double _accuracy, _gamma, _inv_log_gamma, _span_low, _span_high
    cdef public long long _span_key

    cpdef add(self, double value, long long count=*)
    cpdef swap(self, double old, double new)
    @cython.locals(exact=dict, left=cython.longlong, key=cython.longlong, boxed=object)
    cpdef _count_value(self, double value, long long count)
    cpdef long long _bucket(self, double value)
    cpdef _join_span(self, double low, double high, long long key)
    @cython.locals(key=cython.longlong)
    cpdef object _bucket_spanned(self, double low, double high)
    @cython.locals(size=cython.longlong, low=cython.double, top=cython.double, total=cython.double, each=cython.double, exact=dict, buckets=dict, distinct=dict, value=object, seen=cython.longlong, key=cython.longlong)
    cpdef add_gaps(self, list gaps, long long count, object high=*, object least=*)
    @cython.locals(total=cython.double, gap=cython.double)
    cpdef _add_total(self, list gaps, long long count)

cdef class NoGaps(GapHistogram):
    cpdef add(self, double value, long long count=*)
    cpdef swap(self, double old, double new)
    cpdef add_gaps(self, list gaps, long long count, object high=*, object least=*)
