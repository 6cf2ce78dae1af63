from kvsched.blocks cimport blocks_for

cdef class Seq:
    cdef public object request
    cdef public long long index
    cdef public long long prompt_len
    cdef public long long output_len
    cdef public object state
    cdef public long long generated
    cdef public long long base
    cdef public long long blocks
    cdef public long long lifetime_blocks
    cdef public long long host_blocks
    cdef public long long prefill_left
    cdef public long long recompute_upto
    cdef public long long epoch
    cdef public long long admit_seq
    cdef public long long decoded_tick
    cdef public long long grew_tick
    cdef public long long join_step
    cdef public double enqueue_time
    cdef public object first_scheduled_time
    cdef public object first_token_time
    cdef public object first_token_step
    cdef public object finish_time
    cdef public long long num_preemptions
    cdef public long long num_recomputed_tokens
    cdef public long long num_swapped_blocks
    cdef public object max_token_gap
    cdef public object last_token_time
    cdef public long long run_tick
    cdef public double run_first_end
    cdef public double run_first_gap
    cdef public object unschedulable
    cdef public object end_reason
    cdef public object identity
    cdef public object prefix_hit_tokens
    cdef public long long cached_tokens
    cdef public long long v0_cached
    cdef public long long remote_tokens
