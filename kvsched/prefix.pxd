cimport cython

cdef class Prefix:
    cdef readonly tuple segments
    cdef readonly dict _memo
    cdef readonly Py_ssize_t _at
    cdef readonly long long _at_start
    cdef readonly long long num_tokens

    cpdef tuple block_key(self, long long block_size, long long position)
    cdef _fill(self, tuple segments, long long num_tokens)

@cython.locals(out=Prefix)
cdef Prefix _made(tuple segments, long long num_tokens)

@cython.locals(out=Prefix)
cpdef Prefix extended(Prefix prefix, tuple more)

@cython.locals(segments=tuple, segment=tuple, last=cython.Py_ssize_t, i=cython.Py_ssize_t,
               start=cython.longlong, length=cython.longlong)
cpdef Py_ssize_t _segment_at(Prefix prefix, long long token)

@cython.locals(segments=tuple, token=cython.longlong, i=cython.Py_ssize_t,
               offset=cython.longlong, length=cython.longlong, left=cython.longlong,
               take=cython.longlong, pieces=list)
cpdef tuple block_key(Prefix prefix, long long block_size, long long position)

@cython.locals(shared=cython.longlong, i=cython.Py_ssize_t, len_a=cython.longlong,
               len_b=cython.longlong, segment=object)
cpdef long long common_prefix(object a, object b)

cdef class Blocks:
    cdef readonly long long block_size
    cdef readonly long long base
    cdef readonly long long max_id
    cdef readonly dict full

    @cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, item=object, b=cython.longlong,
                   size=object, max_id=object, base=cython.longlong, last=cython.longlong,
                   full=dict, chain=list, segment=object)
    cpdef Prefix prefix(self, list ids, long long prompt_len)
