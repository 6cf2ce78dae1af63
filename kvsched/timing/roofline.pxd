cimport cython

cdef class StepCosts:
    cdef public long long layers
    cdef public double dense_per_token, attention_per_pair, head_per_row, weight_bytes
    cdef public double kv_bytes_per_token, kv_coef, peak_flops, memory_bw
    cdef public double step_fixed, decode_fixed, swap_per_block
    cdef public double attn_pair, attn_kv_byte, attn_q_byte, attn_fixed
    cdef public dict layer_cache, head_cache, decode_cache
    cdef public list gemms
    cdef public object head
    cdef public double kernel, ew_fixed, ew_per_token, ar_fixed, ar_per_token
    cdef public long long tile

    cpdef double gemm_time(self, object gemm, object tokens)
    cpdef double elementwise_time(self, long long tokens)
    cpdef double allreduce_time(self, long long tokens)
    @cython.locals(value=cython.double, total=cython.double)
    cpdef double layer_time(self, long long tokens)
    cpdef double head_time(self, long long rows)

    @cython.locals(pairs=cython.double, kv_tokens=cython.longlong, queries=cython.longlong, chunk=cython.longlong, cached=cython.longlong, memory=cython.double)
    cpdef double prefill_attention(self, object chunks)
    @cython.locals(layer=cython.double, head=cython.double, base=cython.double)
    cpdef double base(self, long long tokens, long long rows, double prefill_attention, long long num_decodes, long long swapped_blocks)
    @cython.locals(tokens=cython.longlong, chunk=cython.longlong, base=cython.double)
    cpdef double duration(self, object chunks, long long num_decodes, long long kv_read_tokens, long long swapped_blocks)
    @cython.locals(base=object)
    cpdef list stretch_durations(self, long long num_decodes, long long kv_start, long long num_steps)
    @cython.locals(pairs=cython.double, tokens=cython.longlong, c=cython.longlong, k=cython.longlong)
    cpdef double batch_flops(self, object chunks, long long num_decodes, long long kv_read_tokens)
    @cython.locals(kv_tokens=cython.longlong, c=cython.longlong, k=cython.longlong)
    cpdef double batch_bytes(self, object chunks, long long kv_read_tokens)
    cpdef tuple utilisation(self, object chunks, long long num_decodes, long long kv_read_tokens, double seconds)
    @cython.locals(dense=cython.double, attention=cython.double)
    cpdef double flops(self, long long tokens, double attended, long long rows)
    cpdef double memory_bytes(self, long long kv_tokens)
    @cython.locals(coef=cython.double, out=list, k=cython.longlong)
    cpdef list decode_durations(self, double base, long long num_decodes, long long kv_start, long long num_steps)
    @cython.locals(num_steps=cython.longlong, mfu=list, mbu=list, peak=cython.double, bandwidth=cython.double, k=cython.longlong, kv=cython.longlong, seconds=cython.double)
    cpdef tuple decode_utilisation(self, long long num_decodes, long long kv_start, list durations)
