cdef class StepPlan:
    cdef public long long step
    cdef public double time
    cdef public long long tick, num_decodes
    cdef public list decoded, prefills, prefill_chunks, swap_ins, produced, preempted
    cdef public long long num_admitted, num_finished, prefill_tokens, recomputed_tokens
    cdef public long long kv_read_tokens, swapped_out_blocks, swapped_in_blocks
    cdef public long long loaded_blocks
