cimport cython
from kvsched.blocks cimport blocks_for
from kvsched.engine.mechanism cimport Scheduler
from kvsched.sequence cimport Seq

@cython.locals(max_queued=object, max_model_len=object, v0=bint, cap=cython.longlong)
cpdef arrive(Scheduler sched, Seq seq, long long step)
@cython.locals(need=cython.longlong, usable=cython.longlong)
cpdef object unschedulable_reason(Scheduler sched, Seq seq)
@cython.locals(queued=list, head=Seq, budget=cython.longlong, behind=object)
cpdef explain_starvation(Scheduler sched, long long step, double now)
