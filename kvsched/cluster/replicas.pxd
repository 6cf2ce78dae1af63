cimport cython
from kvsched.engine.replica cimport Engine
from kvsched.sequence cimport Seq
from kvsched.records.steplog cimport StepLog, Stretch
from kvsched.turns cimport ArrivalQueue

cdef class _Replica:
    cdef public long long index
    cdef public Engine engine
    cdef public StepLog log
    cdef public object events
    cdef public list backlog
    cdef public double drain_at
    cdef public bint whole_steps
    cdef public long long max_steps, step
    cdef public double now
    cdef public long long executed
    cdef public list pending
    cdef public bint idle, stopped, due
    cdef public long long waiting, running, free
    cdef public list history
    cdef public long long num_blocks
    cdef public tuple _fixed

    cpdef observe(self, double time, long long waiting, long long running, long long free)
    @cython.locals(index=object, num_blocks=object, lookup=object)
    cpdef view(self, double now, double delay, list routed_at)

cdef class _Loop:
    cdef public list replicas
    cdef public object router
    cdef public double delay
    cdef public ArrivalQueue arrivals
    cdef public list order, routed, seqs
    cdef public tuple idle_witness
    cdef public list _routed_at
    cdef public object pd

    @cython.locals(arrival=cython.double, start=cython.double, replica=_Replica, slack=cython.double, never=cython.double)
    cpdef run(self)
    @cython.locals(first=_Replica, replica=_Replica)
    cpdef _Replica _first_due(self)
    @cython.locals(i=cython.longlong, k=cython.longlong, replica=_Replica, seq=Seq)
    cpdef _route(self, double now)
    cpdef _send(self, Seq seq, _Replica replica, double now)
    @cython.locals(engine=Engine, arrivals=ArrivalQueue, seq=Seq, horizon=cython.double, due=cython.double, upcoming=cython.double, stretch=Stretch, pending=list, start=cython.double, used=cython.longlong, first=_Replica, slack=cython.double)
    cpdef bint _advance(self, _Replica replica)
    @cython.locals(replica=_Replica, views=list)
    cpdef _Replica _pick(self, object request, double now, list pool, object router, bint watch)
    @cython.locals(idle=cython.longlong)
    cpdef _watch_idle(self, list views, double now)
