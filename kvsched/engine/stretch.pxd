cimport cython
from kvsched.blocks cimport BlockPool
from kvsched.engine.mechanism cimport Scheduler
from kvsched.kvcache.tracker cimport PrefixTracker
from kvsched.sequence cimport Seq
from kvsched.records.steplog cimport Stretch

@cython.locals(prefix=PrefixTracker, running=dict, n=cython.longlong, limit=cython.longlong, kv=cython.longlong, durations=list, ends=list, at=cython.double, t=cython.longlong, pool=BlockPool, spare=cython.longlong, block_due=dict, block_size=cython.longlong, tick=cython.longlong, num_blocks=cython.longlong, blocks_used=cython.longlong, horizon=cython.longlong, used=list, last=cython.longlong, filled=cython.longlong, due_ticks=list, cached_start=cython.longlong, due=list, growing=list, seq=Seq, later=list, k=cython.longlong, first=cython.longlong, stretch=Stretch, bound=cython.longlong, crossed=list, cached=cython.longlong, done=cython.longlong, epoch=cython.longlong)
cpdef Stretch decode_stretch(Scheduler sched, long long step, double now, object step_time, object pricer, double next_arrival, long long max_steps)

@cython.locals(block_due=dict, block_size=cython.longlong, horizon=cython.longlong, grown=object, counts=cython.longlong[::1], total=cython.longlong, t=cython.longlong, growing=list, bucket=list, seq=Seq, epoch=cython.longlong, crossings=cython.longlong, count=cython.longlong, j=cython.longlong, after=cython.longlong, later=list)
cpdef list cross_all(Scheduler sched, long long tick, long long limit, long long blocks_used,
                     list crossed=*)

@cython.locals(size=Py_ssize_t, j=Py_ssize_t, total=cython.double, step=cython.double)
cpdef list running_ends(double now, list durations)

@cython.locals(mid=cython.longlong, at=cython.double, slack=cython.double)
cpdef long long first_due(list ends, long long lo, long long hi, double arrival)
