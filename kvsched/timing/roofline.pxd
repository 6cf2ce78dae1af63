cimport cython

cdef class StepCosts:
    cdef public long long layers
    cdef public double dense_per_token, attention_per_pair, head_per_row, weight_bytes
    cdef public double kv_bytes_per_token, kv_coef, peak_flops, memory_bw

    @cython.locals(dense=cython.double, attention=cython.double)
    cpdef double flops(self, long long tokens, double attended, long long rows)
    cpdef double memory_bytes(self, long long kv_tokens)
    @cython.locals(coef=cython.double, out=list, k=cython.longlong)
    cpdef list decode_durations(self, double base, long long num_decodes, long long kv_start, long long num_steps)
    @cython.locals(num_steps=cython.longlong, mfu=list, mbu=list, peak=cython.double, bandwidth=cython.double, k=cython.longlong, kv=cython.longlong, seconds=cython.double)
    cpdef tuple decode_utilisation(self, long long num_decodes, long long kv_start, list durations)
