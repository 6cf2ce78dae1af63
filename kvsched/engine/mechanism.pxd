cimport cython
from kvsched.blocks cimport BlockPool, blocks_for
from kvsched.engine cimport future_tokens
from kvsched.engine.gaps cimport GapTracker
from kvsched.engine.plan cimport StepPlan
from kvsched.kvcache.tracker cimport PrefixTracker
from kvsched.reservation cimport FutureTokenReservation
from kvsched.sequence cimport Seq
from kvsched.waiting cimport WaitingQueue

cdef class Scheduler:
    cdef public object config
    cdef public BlockPool pool
    cdef public WaitingQueue waiting
    cdef public dict running, prefilling
    cdef public list events
    cdef public bint record_batches, admitting, reserving
    cdef public long long committed_blocks, tick, kv_tokens
    cdef public GapTracker gaps
    cdef public object on_done
    cdef public dict _block_due, _finish_due
    cdef public list _finish_ticks
    cdef public long long _admissions, _front_admissions
    cdef public set _swapped_in
    cdef public long long _num_cumulative_preemption
    cdef public bint _delay_passed
    cdef public double _prev_time
    cdef public bint _prev_prompt
    cdef public double _last_prompt_latency
    cdef public Seq _hol_head
    cdef public tuple _stopped_at
    cdef public long long _block_size, _budget, _chunk_cap, _append_floor
    cdef public object _victim
    cdef public bint _queue_tail
    cdef public object _requeue
    cdef public PrefixTracker prefix
    cdef public bint _v0_prefix, _v0_round
    cdef public list _releases
    cdef public bint _dynamic
    cdef public FutureTokenReservation reservation
    cdef public object partial
    cdef public bint _v0_priority
    cdef public bint _chunked, _worst_case, _has_delay, _admit_after_preempt
    cdef public bint _swap_in_after_preempt, _prefill_past_swapped, _readmit_victims
    cdef public bint _swap_prefills, _swap, _swapped_fifo, _swap_in_front, _warn_preemptions
    cdef public bint _full_isl
    cdef public long long _max_num_seqs, _long_threshold
    cdef public bint fast_loops
    cdef public bint _async, in_flight, _learned
    cdef public list departing, late

    cpdef reject(self, Seq seq, long long step, object reason)
    cpdef StepPlan schedule(self, long long step, double now)
    cpdef _assemble(self, StepPlan plan)
    @cython.locals(tick=cython.longlong, due=list, seq=Seq, epoch=cython.longlong, last=object, gap=cython.double)
    cpdef postprocess(self, StepPlan plan, double end_time)
    cpdef long long generated(self, Seq seq)
    @cython.locals(running=dict, n=cython.longlong, tick=cython.longlong, due=list, growing=list, seq=Seq, epoch=cython.longlong, fills=list, prefix=PrefixTracker)
    cpdef long long decode_need(self)
    cpdef long long _decode(self, StepPlan plan, long long budget)
    @cython.locals(prefix=PrefixTracker)
    cpdef _decoded(self, Seq seq, long long tick, bint grew, list decoded)
    @cython.locals(block_size=cython.longlong, pool=BlockPool, decoded=list, seq=Seq, victim=Seq, grows=bint)
    cpdef long long _decode_exact(self, StepPlan plan, long long budget, long long tick)
    @cython.locals(seq=Seq, s=Seq, kv=cython.longlong)
    cpdef _settle_pass(self, StepPlan plan, long long tick, list decoded)
    @cython.locals(tick=cython.longlong, was_decoding=bint, computed=cython.longlong, done=cython.longlong, swap=bint)
    cpdef _preempt(self, Seq victim, StepPlan plan, Seq cause)
    @cython.locals(tick=cython.longlong)
    cpdef long long _open_pass(self, StepPlan plan)
    @cython.locals(seq=Seq, n=cython.longlong)
    cpdef _end_pass(self, StepPlan plan, long long tick, list decoded, dict chunks)
    cpdef bint _head_stops(self, Seq seq, long long budget)
    @cython.locals(seq=Seq, victim=Seq, cap=cython.longlong, chunk=cython.longlong)
    cpdef long long _continue_prefills(self, StepPlan plan, long long budget)
    @cython.locals(pool=BlockPool, waiting=WaitingQueue, block_size=cython.longlong, chunked=bint, max_num_seqs=cython.longlong, seq=Seq, granted=Seq, cached=cython.longlong, need=cython.longlong, rest=cython.longlong, tokens=cython.longlong, hit=cython.longlong, gate=cython.longlong, cost=cython.longlong, todo=cython.longlong, cap=cython.longlong, chunk=cython.longlong, fresh=cython.longlong, preempting=bint, past_swapped=bint, readmit=bint, i=cython.longlong, counted=cython.longlong, slot=cython.longlong, opened=bint, present=cython.longlong, reservation=FutureTokenReservation)
    cpdef long long _admit(self, StepPlan plan, long long budget, bint allow_prefill, bint allow_swap)
    cpdef _v0_look(self, StepPlan plan, bint readmit)
    cpdef long long v0_counted(self, Seq seq, long long hit)
    @cython.locals(present=cython.longlong, remote=cython.longlong, prefix=PrefixTracker)
    cpdef long long _kv_present(self, Seq seq, long long hit)
    @cython.locals(first=bint, loaded=cython.longlong, cached=cython.longlong)
    cpdef _start_prefill(self, StepPlan plan, Seq seq, long long blocks, long long tokens, long long chunk, long long hit=*, long long counted=*, long long present=*)
    cpdef _take_head(self, StepPlan plan, Seq seq, long long blocks, long long hit=*)
    cpdef _grow(self, Seq seq, long long blocks)
    @cython.locals(start=cython.longlong, recomputed=cython.longlong, running=dict, late=bint)
    cpdef _prefill_chunk(self, StepPlan plan, Seq seq, long long chunk)
    cpdef _finish(self, Seq seq, long long step, double end_time)
    cpdef _leave(self, Seq seq)
    @cython.locals(seq=Seq, departing=list, late=list)
    cpdef _depart(self)
    @cython.locals(computed=cython.longlong)
    cpdef _preempt_departing(self, Seq victim, StepPlan plan, Seq cause)
    @cython.locals(tick=cython.longlong, bucket=list)
    cpdef _push_block_due(self, Seq seq)
    @cython.locals(tick=cython.longlong, bucket=list)
    cpdef _push_finish_due(self, Seq seq)
    @cython.locals(heap=list, buckets=dict, tick=cython.longlong, bucket=list, seq=Seq, epoch=cython.longlong)
    cpdef object next_finish_tick(self)
    @cython.locals(first=cython.longlong, gap=cython.double, later=object)
    cpdef _close_run(self, Seq seq, long long last_tick)

@cython.locals(merged=list, left=list, right=list, i=Py_ssize_t, j=Py_ssize_t, a=Seq, b=Seq)
cpdef list in_admission_order(dict first, dict second)
