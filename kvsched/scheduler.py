"""The step scheduler: running decodes first, then admissions from the waiting queue's head.

`schedule()` decides one step and returns it as a `StepPlan`; it allocates and frees blocks
and moves requests between queues, as vLLM's scheduler does. `postprocess()` applies the
step's outcome once its end time is known: tokens, first tokens, finishes.

Why a step costs O(changes), not O(running): a request that decodes in every decode pass has
`generated == base + tick`, where `tick` counts this run's decode passes. The pass at which
it next crosses a block boundary, and the pass at which it finishes, are known in advance
and kept in two buckets keyed by tick. A pass where every running request decodes and the
free blocks cover every boundary due is decided in bulk; any other pass (a block shortage,
a budget smaller than the batch) runs the lesson's exact per-request loop. Entries made
stale by a preemption, a finish or a skipped decode are recognised by the request's `epoch`.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate, chain
from operator import sub

from kvsched.blocks import BlockPool, blocks_for
from kvsched.config import (
    EngineConfig,
    PreemptionMode,
    PrefixAccounting,
    RejectionTexts,
    Requeue,
    StepOrder,
    Unschedulable,
    Victim,
)
from kvsched.histogram import GapHistogram
from kvsched.kvcache.tracker import CACHES, PrefixTracker
from kvsched.partial_prefills import make_partial_prefills
from kvsched.policies.base import Policy
from kvsched.policies.fcfs import Fcfs
from kvsched.policies.priority import PriorityFirst
from kvsched.reservation import CLIP_MAX_NEW_TOKENS, make_reservation
from kvsched.sequence import Seq, SeqState
from kvsched.steplog import Stretch
from kvsched.timing import TimeModel, constant_duration, stretch_durations
from kvsched.waiting import WaitingQueue

MAX_STRETCH = 1 << 14  # steps one stretch may cover (bounds its lists; the next continues)

Event = tuple[int, float, str, str, str]  # step, time, request_id, event, detail

# (Module constants: an enum member read through its class costs a lookup in Python 3.11.)
RUNNING = SeqState.RUNNING
PREFILLING = SeqState.PREFILLING
WAITING = SeqState.WAITING
SWAPPED = SeqState.SWAPPED
PREEMPTED = SeqState.PREEMPTED
FINISHED = SeqState.FINISHED


@dataclass(slots=True)
class StepPlan:
    """One step's decision. `tick` is the decode pass the step runs (0: no decode pass)."""

    step: int
    time: float
    tick: int = 0
    num_decodes: int = 0  # running requests that decoded (swap-ins not included)
    decoded: list[Seq] | None = None  # who decoded, kept only when batches are recorded
    prefills: list[tuple[Seq, int]] = field(default_factory=list)  # seq, chunk tokens
    # (chunk tokens, context tokens already in the cache), as the prefills: a BatchShape's
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    swap_ins: list[Seq] = field(default_factory=list)
    produced: list[Seq] = field(default_factory=list)  # (re)prefills completed, swap-ins
    preempted: list[Seq] = field(default_factory=list)
    num_admitted: int = 0
    num_finished: int = 0
    prefill_tokens: int = 0  # first-time prefill tokens
    recomputed_tokens: int = 0  # prefill tokens recomputed after a preemption
    kv_read_tokens: int = 0  # KV tokens the step's decodes attend over
    swapped_out_blocks: int = 0
    swapped_in_blocks: int = 0

    @property
    def is_idle(self) -> bool:
        return not (self.tick or self.prefills or self.swap_ins or self.preempted)

    @property
    def is_pure_decode(self) -> bool:
        """Only decodes ran and nobody finished: the next steps may repeat it (a stretch)."""
        return not (self.prefills or self.swap_ins or self.preempted or self.num_admitted
                    or self.num_finished) and self.num_decodes > 0


class GapTracker:
    """End times of decode passes, kept only as far as token-gap queries need them.

    A decode run's longest gap is the largest pass-to-pass gap since its first pass. Runs
    are always closed at the latest completed pass, so a stack of decreasing gaps answers
    "largest gap since pass a" by bisection, and only first-pass end times are remembered:
    memory stays small however long the run.

    `itl` counts every inter-token gap: each pass adds its gap once per request it decoded,
    and when a run closes, its first pass's gap is swapped for the real one (from the
    request's previous token), so the Python work is per pass and per run, never per token."""

    __slots__ = ("last_end", "itl", "_ticks", "_gaps", "_wanted")

    def __init__(self) -> None:
        self.last_end = 0.0  # end time of the latest completed pass (pass 0: time 0)
        self.itl = GapHistogram()
        self._ticks: list[int] = []
        self._gaps: list[float] = []
        self._wanted: dict[int, list[Seq]] = {}

    def want(self, tick: int, seq: Seq) -> None:
        """`seq` needs the end time of pass `tick` (the first of its next run)."""
        bucket = self._wanted.get(tick)
        if bucket is None:
            self._wanted[tick] = [seq]
        else:
            bucket.append(seq)

    def complete(self, tick: int, end: float, num_decodes: int = 0) -> None:
        """Pass `tick` ended at `end`, giving `num_decodes` requests a token."""
        gap = end - self.last_end
        self.last_end = end
        self._push(tick, gap)
        self.itl.add(gap, num_decodes)
        waiting = self._wanted.pop(tick, None)
        if waiting:
            for seq in waiting:
                seq.run_first_end = end
                seq.run_first_gap = gap

    def complete_many(self, first: int, ends: list[float], k: int,
                      num_decodes: int = 0) -> None:
        """Passes `first` .. `first + k - 1` ended at `ends[1]` .. `ends[k]` (`ends[0]`: the
        start of the first, which is the end of the pass before it).

        Runs only ever start at a stretch's first pass (nothing starts inside one), so
        queries reach into a stretch from its first or second pass: its first gap and the
        largest of the others are all the stack needs."""
        end = ends[1]
        gap = end - self.last_end
        self.last_end = ends[k]
        ticks, gaps = self._ticks, self._gaps  # (_push, inlined: once per stretch)
        while gaps and gaps[-1] <= gap:
            gaps.pop()
            ticks.pop()
        ticks.append(first)
        gaps.append(gap)
        if k > 1:
            later = list(map(sub, ends[2:k + 1], ends[1:k]))
            top = max(later)
            while gaps and gaps[-1] <= top:
                gaps.pop()
                ticks.pop()
            ticks.append(first + k - 1)
            gaps.append(top)
        itl = self.itl
        itl.add(gap, num_decodes)
        if k > 1:
            # (Not in one call with the first: that one often differs from the others,
            # which then miss add_gaps' one-value and one-bucket paths.)
            itl.add_gaps(later, num_decodes, top)
        waiting = self._wanted.pop(first, None)
        if waiting:
            for seq in waiting:
                seq.run_first_end = end
                seq.run_first_gap = gap

    def _push(self, tick: int, gap: float) -> None:
        ticks, gaps = self._ticks, self._gaps
        while gaps and gaps[-1] <= gap:
            gaps.pop()
            ticks.pop()
        ticks.append(tick)
        gaps.append(gap)

    def max_gap_since(self, tick: int) -> float | None:
        """The largest gap of the passes from `tick` to the latest one."""
        i = bisect_left(self._ticks, tick)
        return self._gaps[i] if i < len(self._gaps) else None


class Scheduler:
    """Owns the waiting queue, the running set, the block pool and the decode-pass clock."""

    def __init__(self, config: EngineConfig, policy: Policy, events: list[Event] | None = None,
                 record_batches: bool = False) -> None:
        self.config = config
        self.pool = BlockPool(config.usable_blocks, config.watermark_blocks)
        self.waiting = WaitingQueue(policy)
        self.running: dict[int, Seq] = {}  # decoding, in the order they joined the decode set
        self.prefilling: dict[int, Seq] = {}  # chunked prefills under way, in admission order
        self.events: list[Event] = events if events is not None else []
        self.record_batches = record_batches
        self.admitting = True  # False while backpressure holds admissions back
        self.reserving = False  # True: admit only what the pool can carry to the end
        self.committed_blocks = 0  # lifetime blocks of everything running or prefilling
        self.tick = 0
        self.kv_tokens = 0  # tokens in the KV cache of the decoding requests
        self.gaps = GapTracker()
        self.on_done: Callable[[Seq], None] | None = None  # a request finished or was rejected
        self._block_due: dict[int, list[tuple[Seq, int]]] = {}
        self._finish_due: dict[int, list[tuple[Seq, int]]] = {}
        self._finish_ticks: list[int] = []  # heap of the keys of _finish_due
        self._admissions = 0
        self._front_admissions = 0  # counts down: V0 chunked swap-ins join the front
        self._swapped_in: set[Seq] = set()  # V0 chunked: swapped in mid-prefill this step
        self._num_cumulative_preemption = 0  # vLLM V0's counter, for its warning
        # vLLM V0's delay_factor: prefills wait until the oldest waiting request has waited
        # delay_factor x the last prompt step's latency (or nothing runs).
        self._delay_passed = True
        self._prev_time = 0.0
        self._prev_prompt = False
        self._last_prompt_latency = 0.0
        self._hol_head: Seq | None = None  # the head currently blocking a request that fits
        self._stopped_at: tuple[Seq, str, int] | None = None  # head the last admission stopped at
        self._block_size = config.block_size
        self._budget = config.max_num_batched_tokens
        self._chunk_cap = config.long_prefill_token_threshold or config.max_num_batched_tokens
        # vLLM V0: the bulk decode pass needs a block free beyond those it takes, else the
        # pass runs request by request (each decode checks for a free block).
        self._append_floor = 1 if config.append_free_block else 0
        # The rules that follow the queue policy (vLLM V1), resolved once.
        victim = config.victim
        if victim is Victim.BY_POLICY:
            victim = (Victim.LOWEST_PRIORITY if isinstance(policy, PriorityFirst)
                      else Victim.LAST_ADMITTED)
        self._victim = victim
        self._queue_tail = victim is Victim.QUEUE_TAIL
        requeue = config.requeue
        if requeue is Requeue.BY_POLICY:
            requeue = Requeue.FRONT if isinstance(policy, Fcfs) else Requeue.BY_POLICY
        self._requeue = requeue  # BY_POLICY here: back in policy order by original arrival
        # Prefix caching: blocks with identity beside the counts (kvsched.kvcache.tracker).
        self.prefix: PrefixTracker | None = None
        if config.enable_prefix_caching:
            cache = CACHES[config.prefix_cache](config.usable_blocks, config.block_size)
            self.prefix = PrefixTracker(cache, self.pool)
        self._v0_prefix = config.prefix_accounting is PrefixAccounting.V0
        self._releases: list[Seq] = []  # finished in this step, blocks not yet released
        self._dynamic = bool(getattr(self.waiting, "dynamic", False))  # re-ranked each step
        self.reservation = make_reservation(config)  # SGLang's admission rule, or None
        self.partial = make_partial_prefills(config)  # vLLM V0's partial prefills, or None
        # vLLM V0's priority: an arrival-order queue, sorted in steps without a prefill
        self._v0_priority = config.priority_preemption and isinstance(policy, PriorityFirst)
        if self._v0_priority or not config.priority_orders_queue:
            self.waiting = WaitingQueue(Fcfs())  # in arrival order
        if self.partial is not None:  # the threshold then classifies prompts, caps no chunk
            self._chunk_cap = config.max_num_batched_tokens
        self._order = {StepOrder.DECODE_FIRST: self._decode_first,
                       StepOrder.PREFILL_FIRST: self._prefill_first,
                       StepOrder.RUNNING_LOOP: self._running_loop}[config.step_order]

    # -- arrivals -----------------------------------------------------------------------

    def unschedulable_reason(self, seq: Seq) -> str | None:
        """Why `seq` can never run under this engine, or None."""
        cfg = self.config
        if cfg.rejection_texts is RejectionTexts.VLLM_V0:
            v0 = v0_rejection(seq.prompt_len, cfg)
            if v0 is not None:
                return v0
        if not cfg.chunked_prefill and seq.prompt_len > cfg.max_num_batched_tokens:
            return (f"prompt_len {seq.prompt_len} > max_num_batched_tokens "
                    f"{cfg.max_num_batched_tokens}")
        if cfg.step_order is StepOrder.RUNNING_LOOP:
            # vLLM V1 looks at the pool only at the full-prompt gate, and without the
            # watermark when nothing runs: only a prompt over the whole pool never runs.
            need = blocks_for(seq.prompt_len, self._block_size)
            if cfg.scheduler_reserve_full_isl and need > cfg.usable_blocks:
                return (f"needs {need} KV blocks for its prompt, the pool has "
                        f"{cfg.usable_blocks} ({cfg.num_blocks} blocks - 1 null block)"
                        if cfg.null_block else
                        f"needs {need} KV blocks for its prompt, the pool has {cfg.num_blocks}")
            return None
        if self.reservation is not None:  # SGLang admits only below the whole pool
            need = seq.prompt_len + min(seq.output_len, CLIP_MAX_NEW_TOKENS) + self._block_size
            if need >= cfg.usable_blocks * self._block_size:
                return (f"needs {need} KV tokens free to be admitted (prompt + clipped "
                        f"max_new_tokens + a page), the pool has "
                        f"{cfg.usable_blocks * self._block_size}")
        usable = self.pool.num_blocks - self.pool.watermark_blocks  # (the config computes them)
        if seq.lifetime_blocks > usable:
            null = " - 1 null block" if cfg.null_block else ""
            return (f"needs {seq.lifetime_blocks} KV blocks to finish, the pool admits at most "
                    f"{usable} ({cfg.num_blocks} blocks{null} - {cfg.watermark_blocks} "
                    "watermark)")
        return None

    def add(self, seq: Seq, step: int) -> None:
        """A request arrives: queue it, or reject it if it can never run and the engine says so."""
        request = seq.request
        seq.join_step = step
        max_queued = self.config.max_queued_requests
        if max_queued is not None and len(self.waiting) >= max_queued:
            self.reject(seq, step, "The request queue is full.")  # SGLang's text (HTTP 503)
            return
        max_model_len = self.config.max_model_len
        if max_model_len is not None:
            too_long = model_len_rejection(seq.prompt_len, max_model_len)
            v0 = self.config.rejection_texts is RejectionTexts.VLLM_V0
            if v0 and seq.prompt_len == max_model_len:
                too_long = None  # vLLM 0.8.5 runs a prompt of exactly max_model_len
            if too_long:
                self.reject(seq, step, too_long)
                return
            # V1 stops once the sequence holds max_model_len tokens; V0's stop checker
            # once it holds more (RULES.md V0-3): one token later.
            cap = max_model_len - seq.prompt_len + (1 if v0 else 0)
            if seq.output_len > cap:
                seq.output_len = max(cap, 1)
                seq.lifetime_blocks = blocks_for(seq.prompt_len + seq.output_len - 1,
                                                 self._block_size)
        seq.unschedulable = self.unschedulable_reason(seq)
        if seq.unschedulable and self.config.on_unschedulable is Unschedulable.REJECT:
            self.reject(seq, step, seq.unschedulable)
            return
        seq.state = WAITING
        self.waiting.push(seq, request.arrival_time)
        self.events.append((step, request.arrival_time, request.request_id, "arrive",
                            f"unschedulable: {seq.unschedulable}" if seq.unschedulable else ""))

    def reject(self, seq: Seq, step: int, reason: str) -> None:
        request = seq.request
        seq.state = SeqState.REJECTED
        seq.end_reason = reason
        self.events.append((step, request.arrival_time, request.request_id, "reject", reason))
        if self.on_done is not None:
            self.on_done(seq)

    # -- one step -------------------------------------------------------------------------

    def schedule(self, step: int, now: float) -> StepPlan:
        """Decide step `step`, starting at `now`."""
        plan = StepPlan(step, now)
        if self._dynamic:
            self.waiting.reorder(now, self.prefix)
        if self.config.delay_factor:
            self._delay_passed = self._passed_delay(now)
        if self.reservation is not None and not (self.running or self.prefilling):
            self.reservation.idle()
        self._order(plan)
        if plan.prefills:
            self._prev_prompt = True
        return plan

    def _passed_delay(self, now: float) -> bool:
        """vLLM 0.8.5 `Scheduler._passed_delay`, on the simulated clock."""
        if self._prev_prompt:
            self._last_prompt_latency = now - self._prev_time
        self._prev_time, self._prev_prompt = now, False
        if not len(self.waiting):
            return True
        earliest = min(seq.request.arrival_time for seq in self.waiting)
        return (now - earliest > self.config.delay_factor * self._last_prompt_latency
                or not (self.running or self.prefilling))

    def _decode_first(self, plan: StepPlan) -> None:
        if self.partial is not None:
            self.partial.begin(self.prefilling.values(), self.waiting)
        walked: tuple[list[Seq], list[Seq], list[Seq]] | None = None
        if self._swapped_in:
            self._swapped_in.clear()
        if self._queue_tail and self.prefilling:
            budget, walked = self._v0_queue_loop(plan, self._budget)
        else:
            budget = self._decode(plan, self._budget)
            if self.reservation is not None and plan.tick:
                self._reservation_after_decode(plan, bool(plan.preempted))
            if self.prefilling:
                budget = self._continue_prefills(plan, budget)
        admitted = len(plan.prefills)
        if not plan.preempted or self.config.admit_after_preempt:
            allow_swap = not plan.preempted or self.config.swap_in_after_preempt
            self._admit(plan, budget, True, allow_swap)
            if self._stopped_at is not None or self._hol_head is not None:
                self._track_head_of_line(plan)  # (else no head-of-line state to change)
        if walked is not None:
            self._v0_requeue(plan, *walked, admitted)

    def _v0_queue_loop(self, plan: StepPlan, budget: int
                       ) -> tuple[int, tuple[list[Seq], list[Seq], list[Seq]]]:
        """vLLM V0's chunked running loop (RULES.md V0-6) while prefills are under way: one
        queue, decodes and chunks in its order; a request that gets no tokens ends the loop
        (those not reached lead the next queue); a request that cannot append (V0-2)
        preempts the queue's tail, or itself when it is the last. Returns the budget left and
        (not reached, decoded, chunked) in queue order."""
        pool = self.pool
        block_size = self._block_size
        tick = self._open_pass(plan)
        queue = deque(sorted(chain(self.running.values(), self.prefilling.values()),
                             key=lambda s: s.admit_seq))
        cap = self._chunk_cap if self.partial is None else self.partial.slot
        decoded: list[Seq] = []
        chunks: dict[Seq, int] = {}
        while queue:
            seq = queue[0]
            decoding = seq.state is RUNNING
            n = min(1 if decoding else min(seq.prefill_left, cap), budget)
            if n < 1:
                break
            queue.popleft()
            grows = decoding and seq.prompt_len + seq.base + tick - 1 > seq.blocks * block_size
            touched = 1 if decoding or (seq.prompt_len + seq.generated) % block_size else 0
            victim = None
            while touched > pool.free and victim is not seq:
                victim = queue.pop() if queue else seq
                self._preempt(victim, plan, cause=seq)
            if victim is seq:
                break  # nothing was left behind it
            if decoding:
                if grows:
                    self._grow(seq, 1)
                self._decoded(seq, tick, grows, decoded)
            else:
                chunks[seq] = n
            budget -= n
        self._end_pass(plan, tick, decoded, chunks)
        return budget, (list(queue), decoded, list(chunks))

    def _end_pass(self, plan: StepPlan, tick: int, decoded: list[Seq],
                  chunks: dict[Seq, int]) -> None:
        """A walk of the running requests is over: settle its decodes (when the pass
        decoded any: `tick`), then run the prefill chunks it granted."""
        if tick:
            self._settle_pass(plan, tick, decoded)
        for seq, n in chunks.items():
            self._prefill_chunk(plan, seq, n)

    def _v0_requeue(self, plan: StepPlan, left: list[Seq], decoded: list[Seq],
                    chunked: list[Seq], admitted: int) -> None:
        """The running queue after a V0 chunked step (S:1387-1402): those the loop did not
        reach, the swap-ins, the decodes, the chunks that completed a prompt, those that did
        not, then the new prefills."""
        swapped = plan.swap_ins
        swapped_prefills = [s for s, _ in plan.prefills[admitted:] if s in self._swapped_in]
        done = [s for s in chunked if s.state is RUNNING]
        going = [s for s in chunked if s.state is PREFILLING]
        seen = {id(s) for s in chain(left, swapped, swapped_prefills, decoded, done, going)}
        new = [s for s, _ in plan.prefills[admitted:] if id(s) not in seen]
        for seq in chain(left, swapped, swapped_prefills, decoded, done, going, new):
            if seq.state is RUNNING or seq.state is PREFILLING:
                self._admissions += 1
                seq.admit_seq = self._admissions
        self.running = dict(sorted(self.running.items(), key=lambda item: item[1].admit_seq))
        self.prefilling = dict(sorted(self.prefilling.items(),
                                      key=lambda item: item[1].admit_seq))

    def _prefill_first(self, plan: StepPlan) -> None:
        """A step that prefills anything runs no decode (vLLM V0, SGLang)."""
        budget = self._budget
        budget = self._continue_prefills(plan, budget)
        budget = self._admit(plan, budget, allow_prefill=True, allow_swap=False)
        self._track_head_of_line(plan)
        if plan.prefills:
            return
        if self._v0_priority:
            self._v0_priority_preemption(plan)
        admitted_victims = len(plan.preempted)  # by priority preemption, not retraction
        budget = self._decode(plan, budget)
        if self.reservation is not None and plan.tick:
            self._reservation_after_decode(plan, len(plan.preempted) > admitted_victims)
        if len(plan.preempted) == admitted_victims or self.config.admit_after_preempt:
            self._admit(plan, budget, allow_prefill=False, allow_swap=True)

    def _v0_priority_preemption(self, plan: StepPlan) -> None:
        """vLLM 0.8.5 `_schedule_priority_preemption` (RULES.md V0-5), in a step that
        admitted no prefill: sort the running requests by (priority, arrival); while the
        worst of them is worse than the waiting head and the head could not be admitted
        now, preempt that worst one (recompute, to the waiting front); then sort the
        waiting queue (swapped requests aside) by (priority, arrival)."""
        def key(seq: Seq) -> tuple[int, float]:
            return seq.request.priority, seq.request.arrival_time

        running = sorted(self.running.values(), key=key)
        for seq in running:  # the running queue's order is the victims' order (tail first)
            self._admissions += 1
            seq.admit_seq = self._admissions
        self.running = {seq.index: seq for seq in running}
        waiting = self.waiting
        head = waiting.first_unswapped()
        if head is not None:
            need = blocks_for(head.prompt_len + head.generated, self._block_size)
            self.tick += 1  # _preempt counts a decoding victim as at the start of a pass
            while running and key(running[-1]) > key(head):
                if (len(self.running) < self.config.max_num_seqs
                        and head.prompt_len + head.generated <= self._budget
                        and self.pool.can_admit(need)):
                    break
                self._preempt(running.pop(), plan, cause=head)
            self.tick -= 1
        waiting.sort_unswapped(key)

    def _running_loop(self, plan: StepPlan) -> None:
        """vLLM V1 (conformance/RULES.md R3-R8): the running requests in admission order,
        decodes and unfinished chunks alike, then admissions unless the step preempted."""
        threshold = self.config.long_prefill_token_threshold
        if len(self.running) + len(self.prefilling) + self.waiting.size <= 1:
            threshold = 0  # R5: a request alone gets the whole budget
        if self.prefilling:
            budget = self._loop_exact(plan, self._budget, threshold)
        else:  # only decodes: the decode pass (bulk when it fits) is the same loop
            budget = self._decode(plan, self._budget)
        if not plan.preempted or self.config.admit_after_preempt:
            self._admit_chunk(plan, budget, threshold)
            self._track_head_of_line(plan)

    def postprocess(self, plan: StepPlan, end_time: float) -> None:
        """Apply `plan`'s tokens now that the step ended at `end_time`."""
        tick = plan.tick
        if tick:
            self.gaps.complete(tick, end_time, plan.num_decodes)
            due = self._finish_due.pop(tick, None)
            if due:
                for seq, epoch in due:
                    if seq.epoch == epoch:
                        self._close_run(seq, tick)
                        self._finish(seq, plan.step, end_time)
                        plan.num_finished += 1
            if plan.num_finished and self.reservation is not None:
                self.reservation.left_batch()  # decoding requests left the batch
        for seq in plan.produced:
            seq.generated += 1
            last = seq.last_token_time
            if last is None:
                seq.first_token_time = end_time
                seq.first_token_step = plan.step
            else:
                self.gaps.itl.add(end_time - last)
                if seq.max_token_gap is None or end_time - last > seq.max_token_gap:
                    seq.max_token_gap = end_time - last
            seq.last_token_time = end_time
            if seq.generated >= seq.output_len:
                self._finish(seq, plan.step, end_time)
                plan.num_finished += 1
            else:
                seq.base = seq.generated - self.tick
                seq.run_tick = self.tick + 1
                self.gaps.want(seq.run_tick, seq)
                self._push_block_due(seq)
                self._push_finish_due(seq)
        if self._releases:
            self._release_finished()

    def _release_finished(self) -> None:
        """Give the cache the blocks of the requests that finished in the step, in the
        order the step scheduled them (vLLM frees them so: RULES.md P6, an earlier free is
        evicted first)."""
        prefix = self.prefix
        assert prefix is not None
        releases = self._releases
        releases.sort(key=lambda seq: seq.admit_seq)
        for seq in releases:
            prefix.release(seq, seq.prompt_len + seq.output_len - 1)
        releases.clear()

    @property
    def hol_head(self) -> Seq | None:
        """The head of the waiting queue while it blocks a request behind it."""
        return self._hol_head

    def hol_floor(self) -> int:
        """Free blocks that must stay free for the head-of-line state not to change: while a
        head blocks, the request behind it must keep fitting."""
        if self._hol_head is None:
            return 0
        behind = self.waiting.second()
        if behind is None:
            return 0
        need = blocks_for(behind.prompt_len + behind.generated, self._block_size)
        if (self.prefix is not None and not self._v0_prefix
                and behind.state is not SeqState.SWAPPED):
            need = self._blocks_with_hit(behind, need)[0]  # (V0 counts every prompt block)
        return need + self.pool.watermark_blocks

    def _waiting_may_admit(self) -> bool:
        """With requests waiting, whether a rule may admit one mid-stretch (no stretch)."""
        if self.config.delay_factor:
            return True  # the delay passes with time alone: admissions may open mid-stretch
        if self._v0_priority:
            return True  # a shrinking pool may make a worse running request a victim
        if self._dynamic:
            return True  # the order changes with time and the cache: a new head may fit
        if self.prefix is not None and not self.config.chunked_prefill:
            return True  # an eviction may lengthen a waiting prompt's uncached part
        reservation = self.reservation
        # The batch stopped being full, or a head may preempt: it may admit.
        return reservation is not None and (
            reservation.reopened or reservation.preemption_threshold is not None)

    def decode_stretch(self, step: int, now: float, clock: TimeModel, next_arrival: float,
                       max_steps: int) -> Stretch | None:
        """Run, in one move, the pure-decode steps that repeat the step just run.

        Call only right after a step whose plan `is_pure_decode`, with no arrival since:
        then the next steps decode the same requests and, whatever the rules, admit nothing
        (the same head fails for the same reason: the budget left and the running count are
        unchanged and free blocks only shrink). The stretch ends before a step with an
        arrival, with a block shortage, or with a change of head-of-line state, and at the
        first finish (included) or `max_steps`. The caller owns the thrash monitor and the
        admission gate: see `kvsched.engine`.
        """
        running = self.running
        n = len(running)
        if not n or n > self._budget or self.record_batches:
            return None
        if self.waiting.size and self._waiting_may_admit():
            return None
        prefix = self.prefix
        reservation = self.reservation
        finish = self.next_finish_tick()
        limit = min(max_steps, MAX_STRETCH)
        if finish is not None:
            limit = min(limit, finish - self.tick)
        kv = self.kv_tokens
        step_time = constant_duration(clock)
        if step_time is not None:  # every step alike: no model to ask
            if next_arrival != math.inf:
                limit = min(limit, int((next_arrival - now) / step_time) + 2)
            durations = [step_time] * limit
        else:
            durations = stretch_durations(clock, n, kv + n, 1)
            if next_arrival != math.inf and durations[0] > 0:  # steps never get shorter
                limit = min(limit, int((next_arrival - now) / durations[0]) + 2)
            if limit > 1:
                durations = stretch_durations(clock, n, kv + n, limit)
        ends = list(accumulate(durations, initial=now))  # sequential sums, as step by step
        if next_arrival != math.inf:
            # The first step with an arrival by its start ends the stretch before it (the
            # test only turns true as the steps go on).
            if step_time is not None:
                # The limit above is at most two steps past the arrival, or before it: look
                # down from it (what the bisection below finds, without a call per probe).
                while limit > 1:
                    t = ends[limit - 1]
                    if next_arrival > t + 1e-9 * (1.0 + t):
                        break
                    limit -= 1
            else:
                limit = bisect_left(ends, True, 1, limit,
                                    key=lambda t: next_arrival <= t + 1e-9 * (1.0 + t))
        pool = self.pool
        spare = pool.free - self._append_floor  # blocks it may take
        if self._hol_head is not None:
            spare -= self.hol_floor()
        if spare < 0:  # prefill-first steps look at the pool before they decode: it shrank
            return None
        block_due = self._block_due
        block_size = self._block_size
        tick, num_blocks = self.tick, pool.num_blocks
        blocks_used = num_blocks - pool.free
        horizon = tick + limit
        evicted_at: dict[int, int] = {}  # pass -> cached blocks its growth evicted
        cached_at: dict[int, int] = {}  # pass -> cached blocks after it, where it changed
        if prefix is None and spare >= n * ((limit - 1) // block_size + 1):
            # No shortage can end it: every boundary due is crossed, bucket by bucket in
            # any order (only prefix caching reads the order of a bucket's requests).
            used = self._cross_all(tick, limit, blocks_used)
            blocks_used = used[-1]
            due_ticks, filled, last = [], 0, horizon
        else:
            used, last = [], tick
            # Only passes at which someone crosses a block boundary need work: visit those
            # in order (a boundary crossed moves that request's next one a block later).
            # vLLM hashes a block as a decode fills it: the pass before the request's next
            # one crosses into a new block (`filled`: a bucket is also visited for that).
            filled = 1 if prefix is not None and prefix.eager else 0
            due_ticks = sorted([t for t in block_due if t <= horizon + filled])
        cached_start = prefix.num_cached if prefix is not None else 0
        while due_ticks:
            t = heapq.heappop(due_ticks)
            due = block_due[t]
            growing = [entry for entry in due if entry[0].epoch == entry[1]]
            if filled and growing and t - 1 > tick:
                assert prefix is not None
                for seq, _epoch in growing:
                    prefix.filled(seq)
                cached_at[t - 1] = prefix.num_cached
            if t > horizon or len(growing) > spare:
                horizon = min(horizon, t - 1)  # the stretch ends before this pass
                break
            del block_due[t]
            used.extend([blocks_used] * (t - last - 1))
            if growing:
                spare -= len(growing)
                blocks_used += len(growing)
                for seq, _epoch in growing:
                    seq.blocks += 1
                if prefix is not None:
                    for seq, _epoch in growing:
                        prefix.grow(seq, 1)
                    evicted_at[t] = prefix.take_evicted()
                    cached_at[t] = prefix.num_cached  # (a radix leaf may be < a block)
                later = block_due.get(t + block_size)
                if later is None:
                    block_due[t + block_size] = growing
                    if t + block_size <= horizon + filled:
                        heapq.heappush(due_ticks, t + block_size)
                else:
                    later.extend(growing)
            used.append(blocks_used)
            last = t
        used.extend([blocks_used] * (horizon - last))
        tick = horizon
        k = len(used)
        if not k:
            return None
        if prefix is None:
            pool.allocate(blocks_used - (num_blocks - pool.free))
        first = self.tick + 1
        self.tick = tick
        self.kv_tokens = kv + n * k
        if self.config.delay_factor:  # what each step's _passed_delay would have left
            if self._prev_prompt:
                self._last_prompt_latency = ends[0] - self._prev_time
            self._prev_time, self._prev_prompt = ends[k - 1], False
            self._delay_passed = True  # nothing waits during a stretch
        del durations[k:]
        starts = ends[:k]
        self.gaps.complete_many(first, ends, k, n)
        if reservation is not None:
            reservation.after_passes(k)
        stretch = Stretch(step, k, n, n + len(self.prefilling), self.waiting.size, starts,
                          durations, used, kv + n)
        if prefix is not None:  # evictions and filled blocks change the cache
            stretch.evicted_blocks = evicted_list = [0] * k
            for t, evicted in evicted_at.items():
                evicted_list[t - first] = evicted
            cached_list: list[int] = []
            cached, done = cached_start, 0
            for t in sorted(cached_at):
                cached_list.extend([cached] * (t - first - done))
                cached, done = cached_at[t], t - first
            cached_list.extend([cached] * (k - done))
            stretch.cached_blocks = cached_list
        if tick == finish:
            last, end = step + k - 1, ends[k]
            for seq, epoch in self._finish_due.pop(tick):
                if seq.epoch == epoch:
                    self._close_run(seq, tick)
                    self._finish(seq, last, end)
                    stretch.num_finished += 1
            if prefix is not None:
                self._release_finished()
                assert stretch.cached_blocks is not None
                stretch.cached_blocks[-1] = prefix.num_cached  # the finished cached theirs
            if stretch.num_finished and reservation is not None:
                reservation.left_batch()
        return stretch

    def _cross_all(self, tick: int, limit: int, blocks_used: int) -> list[int]:
        """Passes `tick + 1` .. `tick + limit` of a stretch with blocks to spare: every
        request takes the blocks whose boundaries it crosses (each bucket's requests cross
        every `block_size` passes from its tick on). Returns the blocks in use at each."""
        block_due, block_size = self._block_due, self._block_size
        horizon = tick + limit
        grown = [0] * limit  # blocks taken at each pass
        for t in [t for t in block_due if t <= horizon]:
            # (No comprehension per bucket: each is a function call in Python 3.11, and a
            # bucket nearly always holds one request, still live.)
            growing = bucket = block_due.pop(t)
            for seq, epoch in bucket:
                if seq.epoch != epoch:
                    growing = [entry for entry in bucket if entry[0].epoch == entry[1]]
                    break
            if not growing:
                continue
            assert t > tick, "a block boundary left behind"
            crossings = (horizon - t) // block_size + 1
            count = len(growing)
            for j in range(t - tick - 1, limit, block_size):
                grown[j] += count
            for seq, _epoch in growing:
                seq.blocks += crossings
            after = t + crossings * block_size  # beyond the horizon: no bucket visited
            later = block_due.get(after)
            if later is None:
                block_due[after] = growing
            else:
                later.extend(growing)
        grown[0] += blocks_used
        return list(accumulate(grown))

    def generated(self, seq: Seq) -> int:
        """Tokens `seq` has produced so far."""
        return seq.base + self.tick if seq.state is RUNNING else seq.generated

    def close_all_runs(self) -> None:
        """Settle the lazy counters of requests still running when a run stops early."""
        for seq in self.running.values():
            seq.generated = seq.base + self.tick
            self._close_run(seq, self.tick)

    # -- decodes ------------------------------------------------------------------------

    def _decode(self, plan: StepPlan, budget: int) -> int:
        running = self.running
        n = len(running)
        if not n:
            return budget
        self.tick += 1
        tick = plan.tick = self.tick
        due = self._block_due.pop(tick, None)
        growing = [seq for seq, epoch in due if seq.epoch == epoch] if due else ()
        if n > budget or len(growing) > self.pool.free - self._append_floor:
            return self._decode_exact(plan, budget, tick)
        if growing:
            prefix = self.prefix
            if prefix is None:
                self.pool.allocate(len(growing))
            for seq in growing:
                if prefix is not None:
                    prefix.grow(seq, 1)
                seq.blocks += 1
                self._push_block_due(seq)
        if self.prefix is not None and self.prefix.eager:
            fills = self._block_due.get(tick + 1)  # their last block fills in this pass
            if fills:
                for seq, epoch in fills:
                    if seq.epoch == epoch:
                        self.prefix.filled(seq)
        if self.record_batches:
            plan.decoded = list(running.values())
        plan.num_decodes = n
        plan.kv_read_tokens += self.kv_tokens + n
        self.kv_tokens += n
        return budget - n

    def _decoded(self, seq: Seq, tick: int, grew: bool, decoded: list[Seq]) -> None:
        """`seq` decodes in pass `tick` of a loop that goes request by request (its new
        block, if it crossed one, already taken): when that block's growth is due next, and
        (the hashed cache, as vLLM) the hash of a block its token fills, cached as allocated
        even if a later victim gives it back."""
        if grew:
            seq.grew_tick = tick
            self._push_block_due(seq)
        seq.decoded_tick = tick
        decoded.append(seq)
        prefix = self.prefix
        if prefix is not None and prefix.eager and not (
                seq.prompt_len + seq.base + tick - 1) % self._block_size:
            prefix.filled(seq)

    def _decode_exact(self, plan: StepPlan, budget: int, tick: int) -> int:
        """The lesson's loop, request by request, for passes that cannot be decided in bulk."""
        block_size = self._block_size
        pool = self.pool
        worst_case = self.config.append_free_block
        decoded: list[Seq] = []
        for seq in list(self.running.values()):
            if seq.state is not RUNNING:
                continue  # preempted as a victim earlier in this pass
            if budget < 1:
                break
            grows = seq.prompt_len + seq.base + tick - 1 > seq.blocks * block_size
            if (grows or worst_case) and not pool.free:
                victim = self._pick_victim()
                self._preempt(victim, plan, cause=seq)
                if victim is seq:
                    continue
                if victim.decoded_tick == tick:  # already decoded this pass: undo it
                    decoded.remove(victim)
                    budget += 1
            if grows:
                self._grow(seq, 1)
            self._decoded(seq, tick, grows, decoded)
            budget -= 1
        self._settle_pass(plan, tick, decoded)
        return budget

    def _settle_pass(self, plan: StepPlan, tick: int, decoded: list[Seq]) -> None:
        """After an exact decode pass: who was left out stands still (its lazy counters
        move back a pass), and the plan counts who decoded."""
        for seq in self.running.values():
            if seq.decoded_tick != tick:  # left out this pass: its counters stand still
                seq.base -= 1
                seq.epoch += 1
                self._close_run(seq, tick - 1)
                seq.run_tick = tick + 1
                self.gaps.want(seq.run_tick, seq)
                self._push_block_due(seq)
                self._push_finish_due(seq)
        plan.num_decodes = len(decoded)
        plan.kv_read_tokens += sum(s.prompt_len + s.base + tick - 1 for s in decoded)
        self.kv_tokens += len(decoded)
        if self.record_batches:
            plan.decoded = decoded

    def _pick_victim(self) -> Seq:
        rule = self._victim
        if rule is Victim.QUEUE_TAIL:
            queue = self.prefilling or self.running
            return next(reversed(queue.values()))
        if rule is Victim.LAST_ADMITTED:  # both queues are in admission order
            tails = [next(reversed(q.values())) for q in (self.running, self.prefilling) if q]
            return max(tails, key=lambda s: s.admit_seq)
        candidates = chain(self.running.values(), self.prefilling.values())
        if rule is Victim.LOWEST_PRIORITY:
            return max(candidates,
                       key=lambda s: (s.request.priority, s.request.arrival_time, s.admit_seq))
        tick = self.tick - 1  # counts as at the start of this pass
        return min(candidates, key=lambda s: (
            s.base + tick if s.state is RUNNING else s.generated, -s.prompt_len, -s.admit_seq))

    def _preempt(self, victim: Seq, plan: StepPlan, cause: Seq) -> None:
        tick = self.tick
        request = victim.request
        was_decoding = victim.state is RUNNING
        if was_decoding:
            victim.generated = victim.base + tick - 1  # its decode in this pass is undone
            computed = victim.prompt_len + victim.generated - 1
            self.kv_tokens -= victim.prompt_len + victim.generated - 1
            self._close_run(victim, tick - 1)
            del self.running[victim.index]
            if victim.grew_tick == tick and victim.decoded_tick == tick:
                victim.blocks -= 1  # the block it just took holds nothing yet
                if self.prefix is not None:
                    self.prefix.shrink(victim, 1)
                else:
                    self.pool.release(1)
            # The re-prefill recomputes its context and the token it was about to decode.
            victim.recompute_upto = victim.prompt_len + victim.generated
        else:  # mid-prefill: the chunks computed so far are lost (unless swapped out)
            del self.prefilling[victim.index]
            done = computed = victim.prompt_len + victim.generated - victim.prefill_left
            if not (self.config.swap_prefills and self.config.preemption is PreemptionMode.SWAP):
                victim.recompute_upto = max(victim.recompute_upto, done)
                victim.prefill_left = 0
        if self.prefix is not None:  # its computed blocks stay cached: it may find them again
            self.prefix.preempted(victim, computed)
        else:
            self.pool.release(victim.blocks)
        self.committed_blocks -= victim.lifetime_blocks
        victim.epoch += 1
        victim.num_preemptions += 1
        plan.preempted.append(victim)
        if self.config.preemption_warning and self._num_cumulative_preemption % 50 == 0:
            mode = "SWAP" if (self.config.preemption is PreemptionMode.SWAP and (
                was_decoding or self.config.swap_prefills)) else "RECOMPUTE"
            self.events.append((plan.step, plan.time, request.request_id, "warning",
                                V0_PREEMPTION_WARNING.format(
                                    request.request_id, mode,
                                    self._num_cumulative_preemption + 1)))
        self._num_cumulative_preemption += 1
        swap = self.config.preemption is PreemptionMode.SWAP and (
            was_decoding or self.config.swap_prefills)
        mode = "swap" if swap else "recompute"
        self.events.append((plan.step, plan.time, request.request_id, "preempt",
                            f"{mode}; {victim.blocks} blocks freed for "
                            f"{cause.request.request_id}"))
        if swap:
            victim.state = SeqState.SWAPPED
            victim.host_blocks = victim.blocks
            victim.num_swapped_blocks += victim.blocks
            plan.swapped_out_blocks += victim.blocks
            self.events.append((plan.step, plan.time, request.request_id, "swap_out",
                                f"{victim.blocks} blocks"))
        else:
            victim.state = SeqState.PREEMPTED
        victim.blocks = 0
        requeue = self._requeue
        if swap and self.config.swapped_fifo:
            self.waiting.push_swapped(victim)
        elif requeue is Requeue.FRONT:
            self.waiting.push_front(victim)
        elif requeue is Requeue.BACK:
            self.waiting.push(victim, plan.time)
        else:  # as vLLM V1's priority heap: its original (priority, arrival) place
            self.waiting.push(victim, request.arrival_time)

    def _open_pass(self, plan: StepPlan) -> int:
        """Start the step's decode pass for a loop that takes blocks request by request (so
        the lazy growth due at this pass is dropped): its tick, 0 when nothing runs."""
        if not self.running:
            return 0
        self.tick += 1
        tick = plan.tick = self.tick
        self._block_due.pop(tick, None)
        return tick

    def _loop_exact(self, plan: StepPlan, budget: int, threshold: int) -> int:
        """The running loop request by request when chunks are under way (RULES.md R3, R6).

        Blocks are taken per request as it is reached; when they are short, victims are
        preempted until they fit or the request itself was the victim. A victim scheduled
        earlier in the step gives its tokens back. Chunks are applied after the loop."""
        pool = self.pool
        block_size = self._block_size
        tick = self._open_pass(plan)
        members = sorted(chain(self.running.values(), self.prefilling.values()),
                         key=lambda s: s.admit_seq)
        decoded: list[Seq] = []
        chunks: dict[Seq, int] = {}
        for seq in members:
            state = seq.state
            if state is not RUNNING and state is not PREFILLING:
                continue  # preempted as a victim earlier in this step
            if budget < 1:
                break
            if state is RUNNING:
                n = 1
                # the KV of its prompt and generated tokens: this decode writes the last one
                need = 1 if seq.prompt_len + seq.base + tick - 1 > seq.blocks * block_size else 0
            else:
                n = seq.prefill_left
                if 0 < threshold < n:
                    n = threshold
                n = min(n, budget)
                done = seq.prompt_len + seq.generated - seq.prefill_left
                need = blocks_for(done + n, block_size) - seq.blocks
            while need > pool.free:
                victim = self._pick_victim()
                if victim.state is RUNNING and victim.decoded_tick == tick and tick:
                    decoded.remove(victim)
                    budget += 1
                elif victim in chunks:
                    budget += chunks.pop(victim)
                self._preempt(victim, plan, cause=seq)
                if victim is seq:
                    break
            if seq.state is not state:
                continue  # it preempted itself; under fcfs nothing is left after it
            if need:
                self._grow(seq, need)
            if state is PREFILLING and self.prefix is not None:
                # vLLM caches the chunk's blocks as it allocates them: a victim preempted
                # later in this loop leaves them cached (conformance/RULES.md P4)
                self.prefix.computed(seq, seq.prompt_len + seq.generated - seq.prefill_left + n)
            if state is RUNNING:
                self._decoded(seq, tick, bool(need), decoded)
            else:
                chunks[seq] = n
            budget -= n
        self._end_pass(plan, tick, decoded, chunks)
        return budget

    def _admit_chunk(self, plan: StepPlan, budget: int, threshold: int) -> None:
        """vLLM V1's waiting loop (RULES.md R4, R8, R10, R12): the head is admitted with its
        first chunk's blocks only; the loop stops at the first head that does not fit."""
        cfg = self.config
        pool = self.pool
        waiting = self.waiting
        block_size = self._block_size
        chunked = cfg.chunked_prefill
        full_isl = cfg.scheduler_reserve_full_isl
        prefix = self.prefix
        self._stopped_at = None
        while budget > 0 and len(self.running) + len(self.prefilling) < cfg.max_num_seqs:
            seq = waiting.peek()
            if seq is None or self._head_stops(seq, budget):
                break
            tokens = seq.prompt_len + seq.generated
            hit = cost = 0
            if prefix is not None:
                hit = prefix.match(seq)
                cost = prefix.hit_cost(seq, hit)
            todo = tokens - hit
            n = threshold if 0 < threshold < todo else todo
            if not chunked and n > budget:
                self._stopped_at = (seq, f"needs {n} tokens", budget)
                break
            n = min(n, budget)
            # The watermark applies only when something else is running (has_scheduled_reqs).
            floor = pool.watermark_blocks if self.running or self.prefilling else 0
            held = hit // block_size
            whole = blocks_for(tokens, block_size) - held + cost
            if full_isl and whole + floor > pool.free:
                self._stopped_at = (seq, f"needs {whole} blocks", budget)
                break
            need = blocks_for(hit + n, block_size) - held
            if need + cost + floor > pool.free:
                self._stopped_at = (seq, f"needs {need + cost} blocks", budget)
                break
            self._start_prefill(plan, seq, need, tokens, n, hit)
            budget -= n

    # -- prefills and admissions -------------------------------------------------------

    def _head_stops(self, seq: Seq, budget: int) -> bool:
        """Whether the head stops admissions before any budget or block check: admissions are
        held back, it can never run, or backpressure reserves and the pool could not carry it
        to the end."""
        if not self.admitting:
            return True
        if seq.unschedulable:
            self._stopped_at = (seq, "can never run", budget)
            return True
        return self.reserving and (
            self.committed_blocks + seq.lifetime_blocks > self.pool.num_blocks)

    def _continue_prefills(self, plan: StepPlan, budget: int) -> int:
        if not self.prefilling:
            return budget
        worst_case = self.config.append_free_block
        limit = None
        if self.reservation is not None:  # SGLang caps the continued chunk by memory left
            limit = self.reservation.continue_limit(self._decoding_pairs(0, plan),
                                                    self._free_tokens())
        for seq in list(self.prefilling.values()):
            if seq.state is not PREFILLING:
                continue  # preempted as a victim earlier in this loop
            if budget < 1:
                break
            cap = self._chunk_cap if self.partial is None else self.partial.slot
            chunk = min(seq.prefill_left, budget, cap)
            if limit is not None:
                chunk = min(chunk, limit)
            # vLLM V0 holds the whole prompt's blocks; its append check still wants a free
            # block unless the prompt ends on a block boundary (RULES.md V0-2)
            if worst_case and (seq.prompt_len + seq.generated) % self._block_size:
                victim = None
                while not self.pool.free and victim is not seq:
                    victim = self._pick_victim()
                    self._preempt(victim, plan, cause=seq)
                if victim is seq:
                    continue
            budget -= chunk
            self._prefill_chunk(plan, seq, chunk)
        return budget

    def _admit(self, plan: StepPlan, budget: int, allow_prefill: bool, allow_swap: bool) -> int:
        """Admit from the head of the waiting queue; stop at the first head that does not fit."""
        if self.reservation is None and not self.waiting.size:  # (most steps: nothing waits)
            self._stopped_at = None
            return budget
        cfg = self.config
        pool = self.pool
        waiting = self.waiting
        block_size = self._block_size
        chunked = cfg.chunked_prefill
        max_num_seqs = cfg.max_num_seqs
        self._stopped_at = None
        reservation = self.reservation if allow_prefill else None
        partial = self.partial
        past_swapped = cfg.prefill_past_swapped
        readmit = cfg.readmit_victims
        front: list[Seq] = []  # swapped in, to lead the running queue
        aside: list[tuple] = []
        if reservation is not None and not reservation.open_round(
                self._decoding_pairs(0, plan), plan.prefills, len(waiting)):
            return budget
        preempting = reservation is not None and reservation.preemption_threshold is not None
        victims: set[Seq] = set()
        granted: Seq | None = None  # the head whose preemptions already made room
        while (budget > 0 or reservation is not None) and (
                len(self.running) + len(self.prefilling) < max_num_seqs or preempting):
            seq = waiting.peek()
            if seq is None:
                break
            if reservation is not None and not reservation.may_try(self._free_tokens()):
                break  # SGLang's budget_state before each request
            if self._head_stops(seq, budget):
                break
            if preempting:
                if seq in victims:  # SGLang re-queues them after the round
                    aside.append(waiting.set_aside())
                    continue
                if seq is not granted:
                    if not self._priority_preempt(plan, seq, max_num_seqs, victims):
                        break
                    granted = seq  # SGLang adds it right after its preemptions
                    if waiting.peek() is not seq:
                        continue  # a victim re-queued ahead of it: set it aside first
            request = seq.request
            if seq.state is SWAPPED:
                cached = seq.prompt_len + seq.generated  # its KV plus the token it decodes now
                need = blocks_for(cached, block_size)
                rest = seq.prefill_left  # swapped out mid-prefill: the rest, unchunked
                if not allow_swap or not pool.can_admit(need) or rest > budget:
                    if past_swapped:  # V0 chunked: the swap-ins stop, the prefills go on
                        allow_swap = False
                        aside.append(waiting.set_aside())
                        continue
                    if allow_swap:
                        self._stopped_at = (seq, f"needs {need} blocks", budget)
                    break
                self._take_head(plan, seq, need)
                if self.config.swap_in_front:  # V0 chunked: swap-ins lead the running queue
                    front.append(seq)
                plan.swapped_in_blocks += seq.host_blocks
                seq.num_swapped_blocks += seq.host_blocks
                self.events.append((plan.step, plan.time, request.request_id, "swap_in",
                                    f"{seq.host_blocks} blocks"))
                seq.host_blocks = 0
                if rest:
                    seq.state = PREFILLING
                    self._swapped_in.add(seq)
                    self._prefill_chunk(plan, seq, rest)
                    budget -= rest
                    continue
                seq.state = RUNNING
                self.running[seq.index] = seq
                self.kv_tokens += cached
                plan.kv_read_tokens += cached
                plan.swap_ins.append(seq)
                plan.produced.append(seq)
                budget -= 1
            else:
                if not allow_prefill or not self._delay_passed:
                    break
                if not readmit and seq in plan.preempted:  # V0: back in the queue after
                    aside.append(waiting.set_aside())
                    continue
                if partial is not None and not partial.can_schedule(seq):
                    aside.append(waiting.set_aside())  # a long prompt: shorter ones pass it
                    continue
                tokens = seq.prompt_len + seq.generated
                need = blocks_for(tokens, block_size)
                hit = 0
                gate = need
                if self.prefix is not None:
                    hit = self.prefix.match(seq)
                    need, cost = self._blocks_with_hit(seq, need, hit)
                    gate = blocks_for(tokens, block_size) if self._v0_prefix else need
                todo = tokens - hit  # what the prefill computes
                cap = todo if partial is None else partial.slot
                if reservation is not None:
                    allowed = reservation.check(seq, todo, self._free_tokens())
                    if allowed is None:
                        break
                    cap = min(cap, allowed)
                if chunked:
                    chunk = min(todo, budget, self._chunk_cap, cap)
                    if hit and self._v0_prefix and chunk < todo:  # V0: whole blocks only
                        chunk -= chunk % block_size
                        if not chunk:
                            self._stopped_at = (seq, f"needs {block_size} tokens", budget)
                            break
                elif todo > budget:
                    self._stopped_at = (seq, f"needs {todo} tokens", budget)
                    break
                else:
                    chunk = todo
                if not pool.can_admit(gate):
                    self._stopped_at = (seq, f"needs {gate} blocks", budget)
                    break
                fresh = need - cost if self.prefix is not None else need
                self._start_prefill(plan, seq, fresh, tokens, chunk, hit)
                budget -= chunk
                if partial is not None:
                    partial.admitted(seq)
                if reservation is not None and not reservation.admitted(
                        seq, todo, chunk, self._free_tokens()):
                    break
        if reservation is not None:
            reservation.close_round(len(self.running) + len(self.prefilling) >= max_num_seqs,
                                    len(waiting))
        if aside:
            waiting.restore(aside)
        if front:  # ahead of every running request: decodes, then prefills, in their order
            front.sort(key=lambda seq: seq in self._swapped_in)
            self._front_admissions -= len(front)
            for i, seq in enumerate(front):
                seq.admit_seq = self._front_admissions + i
            self.running = dict(sorted(self.running.items(), key=lambda item: item[1].admit_seq))
        return budget

    def _priority_preempt(self, plan: StepPlan, seq: Seq, max_num_seqs: int,
                          victims: set[Seq]) -> bool:
        """SGLang's priority scheduling: a head that finds the batch full (no request slot
        free, or a preemption for it earlier in the round; the round starts with the latch
        clear) preempts worse running requests (added to `victims`), or the round ends."""
        reservation = self.reservation
        assert reservation is not None
        if len(self.running) + len(self.prefilling) >= max_num_seqs:
            reservation.batch_is_full = True
        if not reservation.batch_is_full:
            return True
        # Only the running batch can be preempted: not what this step admitted or swapped in.
        new = {s for s, _ in plan.prefills}.union(plan.swap_ins)
        running = [(s, s.base + self.tick) for s in self.running.values() if s not in new]
        chosen = reservation.priority_victims(seq, running, self._free_tokens())
        if chosen is None:
            return False
        # _preempt counts a decoding victim as at the start of the pass under way; no pass
        # has run in this step yet, so it is the start of the next one.
        self.tick += 1
        for victim in chosen:
            self._preempt(victim, plan, cause=seq)
        self.tick -= 1
        victims.update(chosen)
        return True

    def _free_tokens(self) -> int:
        """Free KV tokens as SGLang counts them: a prefill under way holds only the chunks
        computed so far (kvsched allocates its whole prompt at admission)."""
        block_size = self._block_size
        free = self.pool.free * block_size
        for seq in self.prefilling.values():
            done = seq.prompt_len + seq.generated - seq.prefill_left
            free += seq.blocks * block_size - -(-done // block_size) * block_size
        return free

    def _decoding_pairs(self, back: int, plan: StepPlan | None = None) -> list[tuple[int, int]]:
        """(generated, output_len) of each decoding request, `back` passes ago; a prefill
        that completes in `plan` is not decoding yet."""
        tick = self.tick - back
        done = {seq for seq, _ in plan.prefills} if plan is not None and plan.prefills else ()
        return [(seq.base + tick, seq.output_len) for seq in self.running.values()
                if seq not in done]

    def _reservation_after_decode(self, plan: StepPlan, retracted: bool) -> None:
        """SGLang's update_running_batch: a retraction re-estimates the ratio from the
        requests left (their tokens before this pass), else it decays."""
        assert self.reservation is not None
        self.reservation.after_decode(retracted, self._decoding_pairs(1) if retracted else ())

    def _start_prefill(self, plan: StepPlan, seq: Seq, blocks: int, tokens: int,
                       chunk: int, hit: int = 0) -> None:
        """Admit the head for a (re)prefill of `tokens`, `hit` of them found cached and
        `chunk` computed now; it takes `blocks` fresh blocks (beside its hit blocks)."""
        self._take_head(plan, seq, blocks, hit)
        seq.prefill_left = tokens - hit
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = plan.time
        if seq.prefix_hit_tokens is None:
            seq.prefix_hit_tokens = hit
        seq.cached_tokens += hit
        kind = "recompute" if seq.state is PREEMPTED else "prefill"
        detail = f"{kind} {tokens} tokens"
        if hit:
            detail += f", {hit} cached"
        if chunk < tokens - hit:
            detail += f", first chunk {chunk}"
        self.events.append((plan.step, plan.time, seq.request.request_id, "admit", detail))
        self._prefill_chunk(plan, seq, chunk)

    def _take_head(self, plan: StepPlan, seq: Seq, blocks: int, hit: int = 0) -> None:
        """Admit the head of the waiting queue: pop it, give it its `hit` tokens' cached
        blocks and `blocks` fresh ones, count it."""
        self.waiting.pop()
        if self.prefix is not None:
            self.prefix.admit(seq, hit, blocks)
        else:
            self.pool.allocate(blocks)
        seq.blocks = blocks + hit // self._block_size
        self._admissions += 1
        seq.admit_seq = self._admissions
        self.committed_blocks += seq.lifetime_blocks
        plan.num_admitted += 1

    def _track_head_of_line(self, plan: StepPlan) -> None:
        """Record head-of-line blocking: the head cannot be admitted, the next one could.

        Only transitions become events (`hol_block` when a head starts blocking, `hol_release`
        when it stops), so the cost per step is a peek at the second request."""
        stop = self._stopped_at
        blocking = None
        if stop is not None:
            head, why, budget = stop
            behind = self.waiting.second()
            if behind is not None and self._fits(behind, budget):
                blocking = (head, why, budget, behind)
        current = self._hol_head
        if blocking is not None and blocking[0] is current:
            return
        if current is not None:
            self.events.append((plan.step, plan.time, current.request.request_id,
                                "hol_release", ""))
            self._hol_head = None
        if blocking is not None:
            head, why, budget, behind = blocking
            self._hol_head = head
            self.events.append((plan.step, plan.time, head.request.request_id, "hol_block",
                                f"{why}, {budget} tokens and {self.pool.free} blocks left; "
                                f"{behind.request.request_id} behind it would fit"))

    def _fits(self, seq: Seq, budget: int) -> bool:
        """Whether `seq` could be admitted with `budget` tokens and the blocks free now."""
        if seq.unschedulable:
            return False
        cached = seq.prompt_len + seq.generated
        swap_or_chunk = seq.state is SeqState.SWAPPED or self.config.chunked_prefill
        need = blocks_for(cached, self._block_size)
        hit = 0
        if self.prefix is not None and seq.state is not SeqState.SWAPPED:
            hit = self.prefix.match(seq)
            if not self._v0_prefix:
                need = self._blocks_with_hit(seq, need, hit)[0]
        tokens = 1 if swap_or_chunk else cached - hit
        return tokens <= budget and self.pool.can_admit(need)

    def _blocks_with_hit(self, seq: Seq, need: int, hit: int | None = None) -> tuple[int, int]:
        """Free blocks admitting `seq` takes for `need` blocks of KV when its prefix is
        cached: the fresh ones plus the hit blocks nobody holds (they leave the free queue);
        and the latter alone."""
        prefix = self.prefix
        assert prefix is not None
        if hit is None:
            hit = prefix.match(seq)
        cost = prefix.hit_cost(seq, hit)
        return need - hit // self._block_size + cost, cost

    def _grow(self, seq: Seq, blocks: int) -> None:
        """`seq` takes `blocks` fresh blocks for the tokens it computes next."""
        if self.prefix is not None:
            self.prefix.grow(seq, blocks)
        else:
            self.pool.allocate(blocks)
        seq.blocks += blocks

    def _prefill_chunk(self, plan: StepPlan, seq: Seq, chunk: int) -> None:
        start = seq.prompt_len + seq.generated - seq.prefill_left  # context tokens done so far
        seq.prefill_left -= chunk
        if self.prefix is not None:  # vLLM caches a chunk's full blocks as it schedules it
            self.prefix.computed(seq, start + chunk)
        plan.prefills.append((seq, chunk))
        plan.prefill_chunks.append((chunk, start))
        recomputed = min(chunk, max(0, seq.recompute_upto - start))
        if recomputed:
            plan.recomputed_tokens += recomputed
            seq.num_recomputed_tokens += recomputed
        plan.prefill_tokens += chunk - recomputed
        if seq.prefill_left:
            seq.state = PREFILLING
            self.prefilling[seq.index] = seq
            return
        # The whole prompt (and, after a recompute, what was generated) is in the cache now.
        self.prefilling.pop(seq.index, None)
        seq.state = RUNNING
        running = self.running
        if self._queue_tail:  # it joins the running queue's tail now
            self._admissions += 1
            seq.admit_seq = self._admissions
        late = bool(running) and next(reversed(running.values())).admit_seq > seq.admit_seq
        running[seq.index] = seq
        if late:  # a chunked prefill finished after a later admission: keep admission order
            self.running = dict(sorted(running.items(), key=lambda item: item[1].admit_seq))
        self.kv_tokens += seq.prompt_len + seq.generated
        plan.produced.append(seq)

    # -- bookkeeping ------------------------------------------------------------------

    def _finish(self, seq: Seq, step: int, end_time: float) -> None:
        seq.state = FINISHED
        seq.generated = seq.output_len
        seq.finish_time = end_time
        if self.prefix is not None:  # its answer's full blocks join the cache, at step end
            self._releases.append(seq)
        else:
            self.pool.release(seq.blocks)
        self.committed_blocks -= seq.lifetime_blocks
        seq.blocks = 0
        self.kv_tokens -= seq.prompt_len + seq.output_len - 1
        del self.running[seq.index]
        seq.epoch += 1
        self.events.append((step, end_time, seq.request.request_id, "finish",
                            f"{seq.output_len} tokens"))
        if self.on_done is not None:
            self.on_done(seq)

    def _push_block_due(self, seq: Seq) -> None:
        # The decode pass at which cache + 1 first exceeds the blocks held.
        tick = seq.blocks * self._block_size - seq.prompt_len + 2 - seq.base
        bucket = self._block_due.get(tick)
        if bucket is None:
            self._block_due[tick] = [(seq, seq.epoch)]
        else:
            bucket.append((seq, seq.epoch))

    def _push_finish_due(self, seq: Seq) -> None:
        tick = seq.output_len - seq.base
        bucket = self._finish_due.get(tick)
        if bucket is None:
            self._finish_due[tick] = [(seq, seq.epoch)]
            heapq.heappush(self._finish_ticks, tick)
        else:
            bucket.append((seq, seq.epoch))

    def next_finish_tick(self) -> int | None:
        """The first decode pass ahead at which a running request finishes."""
        heap, buckets = self._finish_ticks, self._finish_due
        while heap:
            tick = heap[0]
            bucket = buckets.get(tick)
            if bucket is not None and tick > self.tick:
                for seq, epoch in bucket:  # (a loop, not any(): called once per stretch)
                    if seq.epoch == epoch:
                        return tick
                del buckets[tick]  # only stale entries: forget it (a new push re-adds it)
            heapq.heappop(heap)
        return None

    def _close_run(self, seq: Seq, last_tick: int) -> None:
        """Fold the decode run ending at pass `last_tick` into `seq.max_token_gap`."""
        first = seq.run_tick
        if last_tick < first or seq.last_token_time is None:
            return
        gap = seq.run_first_end - seq.last_token_time
        self.gaps.itl.swap(seq.run_first_gap, gap)  # its first pass counted the pass's gap
        if last_tick > first:
            later = self.gaps.max_gap_since(first + 1)
            if later is not None and later > gap:
                gap = later
        if seq.max_token_gap is None or gap > seq.max_token_gap:
            seq.max_token_gap = gap
        seq.last_token_time = self.gaps.last_end


# vLLM 0.8.5 core/scheduler.py::Scheduler._preempt, verbatim.
V0_PREEMPTION_WARNING = (
    "Sequence group {} is preempted by PreemptionMode.{} mode because there is not enough KV "
    "cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}")


def model_len_rejection(prompt_len: int, max_model_len: int) -> str | None:
    """vLLM's input processor check (v1/engine/input_processor.py), messages verbatim: a
    generate model needs room for at least one output token."""
    if prompt_len > max_model_len:
        return (f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
                f"length of {max_model_len}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens.")
    if prompt_len == max_model_len:
        return (f"The decoder prompt (length {prompt_len}) plus the number of requested "
                "output tokens (at least 1) is longer than the maximum model length of "
                f"{max_model_len}. Make sure that `max_model_len` is no smaller than the "
                "number of text tokens (prompt + requested output tokens).")
    return None


def v0_rejection(prompt_len: int, cfg: EngineConfig) -> str | None:
    """vLLM 0.8.5 `_schedule_prefills`' warnings, verbatim, for a prompt it ignores: over
    `min(max_model_len, max_num_batched_tokens)` (`max_model_len` with chunking), or whose
    blocks would leave less than the watermark of the whole pool (`AllocStatus.NEVER`)."""
    limit = cfg.max_model_len if cfg.chunked_prefill else min(
        cfg.max_model_len or cfg.max_num_batched_tokens, cfg.max_num_batched_tokens)
    if limit is not None and prompt_len > limit:
        return f"Input prompt ({prompt_len} tokens) is too long and exceeds limit of {limit}"
    if cfg.num_blocks - blocks_for(prompt_len, cfg.block_size) < cfg.watermark_blocks:
        return (f"Input prompt ({prompt_len} tokens) + lookahead slots (0) is too long and "
                "exceeds the capacity of block_manager")
    return None
