cimport cython

cdef class Stretch:
    cdef public long long step, num_steps, num_decodes, num_running, num_waiting
    cdef public list starts, durations, blocks_used
    cdef public long long kv_first, num_finished
    cdef public list mfu, mbu, cached_blocks, evicted_blocks

cdef class StepLog:
    cdef public long long num_blocks
    cdef public object stats
    cdef public list kept
    cdef public object _sink
    cdef public list _chunk
    cdef public long long _limit

    cpdef row(self, object row)
    cpdef stretch(self, Stretch stretch)
