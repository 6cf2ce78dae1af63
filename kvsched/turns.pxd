cimport cython

cdef extern from "Python.h":
    int PyObject_GenericSetAttr(object o, object name, object value) except -1
    object PyType_GenericAlloc(type kind, Py_ssize_t items)

cdef class ArrivalQueue:
    cdef public object requests, times, _order
    cdef public long long _next, _k, _held
    cdef public list _chunk_times, _chunk_order, _chunk_requests, _released
    cdef public dict _waiters

    @cython.locals(k=cython.longlong, timed=cython.double)
    cpdef double next_time(self)
    @cython.locals(k=cython.longlong, i=cython.longlong)
    cpdef tuple pop(self)


@cython.locals(made=list, k=Py_ssize_t, code=cython.longlong, request=object, name=object, default=object)
cpdef list plain_requests(list ids, list arrivals, list prompts, list outputs, list priorities, list codes, tuple names)
