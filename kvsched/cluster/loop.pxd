cimport cython
from kvsched.engine.replica cimport Engine
from kvsched.sequence cimport Seq
from kvsched.records.steplog cimport StepLog, Stretch
from kvsched.turns cimport ArrivalQueue

cdef class Arrivals:
    cdef public ArrivalQueue queue
    cdef public object order
    cdef public dict live
    cdef public set never_released
    cdef public long long _block_size

    @cython.locals(i=cython.longlong)
    cpdef Seq pop(self)
    @cython.locals(k=cython.longlong, seq=Seq)
    cpdef Seq _make(self, long long i, object request)

@cython.locals(queue=ArrivalQueue, backlog=list, drain_at=cython.longlong, step=cython.longlong, executed=cython.longlong, now=cython.double, turns=cython.longlong, abort_mask=cython.longlong, slack=cython.double, horizon=cython.double, upcoming=cython.double, seq=Seq, stretch=Stretch, batch=list)
cpdef tuple run_loop(Engine engine, Arrivals seqs, StepLog log, long long max_steps, bint whole_steps, object events=*, object progress=*, object abort=*)

@cython.locals(first_step=object, status=object)
cpdef put_record(object records, object i, Seq seq, object leftover, Engine engine)
