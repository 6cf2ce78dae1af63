cimport cython

cdef class Prefix:
    cdef readonly tuple segments
    cdef readonly dict _memo
    cdef readonly list _starts
    cdef readonly long long num_tokens

    cpdef tuple block_key(self, long long block_size, long long position)

@cython.locals(out=Prefix)
cpdef Prefix extended(Prefix prefix, tuple more)

@cython.locals(total=cython.longlong, i=cython.Py_ssize_t, low=cython.Py_ssize_t,
               high=cython.Py_ssize_t, middle=cython.Py_ssize_t, start=cython.longlong)
cpdef Py_ssize_t _segment_at(object segments, list starts, long long token)

@cython.locals(segments=tuple, starts=list, token=cython.longlong, i=cython.Py_ssize_t,
               offset=cython.longlong, length=cython.longlong, left=cython.longlong,
               take=cython.longlong, pieces=list)
cpdef tuple block_key(object prefix, long long block_size, long long position)

@cython.locals(shared=cython.longlong, i=cython.Py_ssize_t, len_a=cython.longlong,
               len_b=cython.longlong)
cpdef long long common_prefix(object a, object b)
