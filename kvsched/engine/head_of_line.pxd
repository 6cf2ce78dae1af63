cimport cython
from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan
from kvsched.sequence cimport Seq

@cython.locals(stop=tuple, head=Seq, behind=Seq, current=Seq, blocking=tuple)
cpdef track(Scheduler sched, StepPlan plan)
@cython.locals(cached=cython.longlong, swap_or_chunk=bint, need=cython.longlong, hit=cython.longlong, tokens=cython.longlong)
cpdef bint fits(Scheduler sched, Seq seq, long long budget)
@cython.locals(behind=Seq, need=cython.longlong)
cpdef long long hol_floor(Scheduler sched)
