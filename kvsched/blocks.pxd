cdef class BlockPool:
    cdef public long long num_blocks, watermark_blocks, free

    cpdef bint can_admit(self, long long num_blocks)
    cpdef allocate(self, long long num_blocks)
    cpdef release(self, long long num_blocks)

cpdef long long blocks_for(long long num_tokens, long long block_size)
