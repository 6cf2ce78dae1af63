cimport cython
from kvsched.blocks cimport BlockPool
from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan
from kvsched.sequence cimport Seq
from kvsched.waiting cimport WaitingQueue

cdef class VllmV1Scheduler(Scheduler):
    @cython.locals(plan=StepPlan, learned=bint)
    cpdef StepPlan schedule(self, long long step, double now)
    cpdef _assemble(self, StepPlan plan)
    @cython.locals(pool=BlockPool, block_size=cython.longlong, tick=cython.longlong, members=list, decoded=list, chunks=dict, seq=Seq, victim=Seq, n=cython.longlong, need=cython.longlong, done=cython.longlong)
    cpdef long long _loop_exact(self, StepPlan plan, long long budget, long long threshold)
    @cython.locals(pool=BlockPool, waiting=WaitingQueue, block_size=cython.longlong, chunked=bint, full_isl=bint, seq=Seq, tokens=cython.longlong, hit=cython.longlong, cost=cython.longlong, todo=cython.longlong, n=cython.longlong, floor=cython.longlong, held=cython.longlong, whole=cython.longlong, need=cython.longlong)
    cpdef _admit_chunk(self, StepPlan plan, long long budget, long long threshold)
