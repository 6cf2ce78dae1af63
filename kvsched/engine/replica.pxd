cimport cython
from kvsched.backpressure cimport ThrashMonitor
from kvsched.blocks cimport BlockPool
from kvsched.kvcache.tracker cimport PrefixTracker
from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan
from kvsched.sequence cimport Seq
from kvsched.records.steplog cimport Stretch

cdef class Engine:
    cdef public object config
    cdef public bint stretches
    cdef public object clock
    cdef public object _step_duration, _duration_shape, _shape, _utilisation
    cdef public Scheduler sched
    cdef public list events
    cdef public ThrashMonitor monitor
    cdef public object gate
    cdef public bint record_batches
    cdef public list batches
    cdef public bint _batch_in_admission_order, _steady
    cdef public bint _constant_time
    cdef public double _step_time
    cdef public long long _block_size
    cdef public object _pricer
    cdef public double _load_per_block

    cpdef arrive(self, Seq seq, long long step, double now)
    @cython.locals(sched=Scheduler, monitor=ThrashMonitor, plan=StepPlan, idle=bint, num_decodes=cython.longlong, computed=cython.longlong, swapped=cython.longlong, duration=cython.double, num_running=cython.longlong, num_waiting=cython.longlong, pool=BlockPool, blocks_free=cython.longlong, end=cython.double, signal=bint, ratio=cython.double, changed=bint, cached=cython.longlong, evicted=cython.longlong, prefix=PrefixTracker)
    cpdef object step(self, long long step, double now)
    @cython.locals(stretch=Stretch)
    cpdef Stretch stretch(self, long long step, double now, double next_arrival, long long max_steps)
    cpdef bint _settled(self)
