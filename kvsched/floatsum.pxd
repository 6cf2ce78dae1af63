cimport cython

@cython.locals(total=cython.double, value=cython.double)
cpdef double fold(object values, double start=*)
