cimport cython
from kvsched.blocks cimport BlockPool, blocks_for
from kvsched.engine cimport head_of_line
from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan
from kvsched.kvcache.tracker cimport PrefixTracker
from kvsched.sequence cimport Seq
from kvsched.waiting cimport WaitingQueue

cdef class VllmV1Scheduler(Scheduler):
    @cython.locals(plan=StepPlan, learned=bint)
    cpdef StepPlan schedule(self, long long step, double now)
    cpdef _assemble(self, StepPlan plan)
    @cython.locals(running=dict, block_size=cython.longlong, demand=cython.longlong, need=cython.longlong, seq=Seq, n=cython.longlong, done=cython.longlong, tick=cython.longlong, growing=list, due=list, active=list, prefix=PrefixTracker, fills=list, grows=set, decoded=list, chunks=dict, acting=dict, grew=bint, fresh=cython.longlong, epoch=cython.longlong)
    cpdef long long _loop_settled(self, StepPlan plan, long long budget, long long threshold)
    @cython.locals(pool=BlockPool, block_size=cython.longlong, tick=cython.longlong, members=list, decoded=list, chunks=dict, seq=Seq, victim=Seq, n=cython.longlong, need=cython.longlong, done=cython.longlong)
    cpdef long long _loop_exact(self, StepPlan plan, long long budget, long long threshold)
    @cython.locals(pool=BlockPool, waiting=WaitingQueue, block_size=cython.longlong, chunked=bint, full_isl=bint, prefix=PrefixTracker, seq=Seq, tokens=cython.longlong, hit=cython.longlong, cost=cython.longlong, todo=cython.longlong, n=cython.longlong, floor=cython.longlong, held=cython.longlong, whole=cython.longlong, need=cython.longlong, present=cython.longlong)
    cpdef _admit_chunk(self, StepPlan plan, long long budget, long long threshold)
