cimport cython
from kvsched.sequence cimport Seq

@cython.locals(block_size=cython.longlong, free=cython.longlong, done=cython.longlong,
               seq=Seq)
cpdef long long free_tokens(object sched)
@cython.locals(tick=cython.longlong, seq=Seq)
cpdef list decoding_pairs(object sched, long long back, object plan=*)
cpdef after_decode(object sched, object plan, bint retracted)
