cimport cython
from kvsched.engine.plan cimport StepPlan
from kvsched.sequence cimport Seq

@cython.locals(block_size=cython.longlong, free=cython.longlong, done=cython.longlong,
               seq=Seq)
cpdef long long free_tokens(object sched)
@cython.locals(running=dict, done=set, seq=Seq)
cpdef list decoding(object sched, StepPlan plan=*)
@cython.locals(tick=cython.longlong, seq=Seq, left=list)
cpdef after_decode(object sched, object plan, bint retracted)
