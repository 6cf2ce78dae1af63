"""vLLM 0.33 V1's scheduler (`v1/core/sched/scheduler.py`, conformance/RULES.md R3-R12): one
loop over the running requests in admission order, decodes and unfinished chunks alike
(blocks per chunk, victims preempted until a request's tokens fit), then the waiting loop,
which admits a head with its first chunk's blocks only and none in a step that preempted.

With `async_scheduling` (vLLM's `AsyncScheduler`, `v1/core/sched/async_scheduler.py`, as the
engine core's batch queue drives it: RULES.md A1-A6), each step is decided while the step
before it runs: the requests whose last token that step computes are still running when the
next one is decided (they hold their blocks and places, are not scheduled, and may be
victims), the arrivals during it wait a step more, and a decision that schedules nothing
costs no time: the engine learns the running step's outcome and decides again."""

from __future__ import annotations

from kvsched.blocks import blocks_for
from kvsched.config import EngineConfig
from kvsched.engine import head_of_line
from kvsched.engine.mechanism import Scheduler, admission_key, in_admission_order
from kvsched.engine.plan import Event, StepPlan
from kvsched.policies.base import Policy
from kvsched.sequence import Seq, SeqState

RUNNING = SeqState.RUNNING
PREFILLING = SeqState.PREFILLING


class VllmV1Scheduler(Scheduler):
    """The running loop, then admissions unless the step preempted."""

    def __init__(self, config: EngineConfig, policy: Policy, events: list[Event] | None = None,
                 record_batches: bool = False) -> None:
        Scheduler.__init__(self, config, policy, events, record_batches)
        self._async = config.async_scheduling
        if self._async and self.prefix is not None:
            self.prefix.lagged = self.prefix.eager

    def schedule(self, step: int, now: float) -> StepPlan:
        """Decide step `step`, starting at `now`; with async scheduling, as decided while the
        step before it ran (RULES.md A1-A4)."""
        self._learned = False
        plan = Scheduler.schedule(self, step, now)
        if not self._async:
            return plan
        learned = bool(self.departing or self.late)
        self._depart()  # vLLM's update_from_output of the step before, after schedule()
        if learned and plan.is_idle:
            # An empty batch takes no time: the next decision is made at once, knowing the
            # step before (A3).
            self._learned = False
            plan = Scheduler.schedule(self, step, now)
        self.in_flight = not plan.is_idle
        return plan

    def _assemble(self, plan: StepPlan) -> None:
        threshold = self._long_threshold
        # (async: the requests finished in the running step are still vLLM's running ones)
        if (len(self.running) + len(self.prefilling) + len(self.departing)
                + self.waiting.size <= 1):
            threshold = 0  # R5: a request alone gets the whole budget
        if self.prefilling:
            budget = self._loop_settled(plan, self._budget, threshold)
            if budget < 0:
                budget = self._loop_exact(plan, self._budget, threshold)
        else:  # only decodes: the decode pass (bulk when it fits) is the same loop
            budget = self._decode(plan, self._budget)
        if not plan.preempted or self._admit_after_preempt:
            self._admit_chunk(plan, budget, threshold)
            head_of_line.track(self, plan)

    def _loop_settled(self, plan: StepPlan, budget: int, threshold: int) -> int:
        """The running loop in O(changes) when it can neither run out of budget nor of
        blocks (every decode and every chunk fits): the loop's operations for the requests
        that do something (a chunk, a decode that takes or fills a block), in admission
        order, as `_loop_exact` makes them; the others only decode. -1 when it could run
        out (or batches are recorded): `_loop_exact` decides then."""
        if self.record_batches or not self.fast_loops:
            return -1
        running = self.running
        block_size = self._block_size
        demand = len(running)
        need = 0
        for seq in self.prefilling.values():
            n = seq.prefill_left
            if 0 < threshold < n:
                n = threshold
            demand += n
            done = seq.prompt_len + seq.generated - seq.prefill_left
            need += blocks_for(done + n, block_size) - seq.blocks
        if demand > budget:
            return -1
        tick = self.tick + 1
        growing: list[Seq] = []
        if running:
            due = self._block_due.get(tick)
            if due:
                growing = [seq for seq, epoch in due if seq.epoch == epoch]
        if need + len(growing) > self.pool.free:
            return -1
        active = list(growing)
        prefix = self.prefix
        if prefix is not None and prefix.eager and running:
            fills = self._block_due.get(tick + 1)  # their last block fills in this pass
            if fills:
                active.extend([seq for seq, epoch in fills if seq.epoch == epoch])
        tick = self._open_pass(plan)
        grows = set(growing)
        decoded: list[Seq] = []
        chunks: dict[Seq, int] = {}
        acting = {seq.index: seq for seq in sorted(active, key=admission_key)}  # (once each)
        for seq in in_admission_order(acting, self.prefilling):
            if seq.state is RUNNING:
                grew = seq in grows
                if grew:
                    self._grow(seq, 1)
                self._decoded(seq, tick, grew, decoded)
                continue
            n = seq.prefill_left
            if 0 < threshold < n:
                n = threshold
            done = seq.prompt_len + seq.generated - seq.prefill_left
            fresh = blocks_for(done + n, block_size) - seq.blocks
            if fresh:
                self._grow(seq, fresh)
            if prefix is not None:  # (as `_loop_exact`: cached as allocated)
                prefix.computed(seq, done + n)
            chunks[seq] = n
        if tick:  # every running request decoded: each read its context and its token
            plan.num_decodes = len(running)
            plan.kv_read_tokens += self.kv_tokens + len(running)
            self.kv_tokens += len(running)
        for seq, n in chunks.items():
            self._prefill_chunk(plan, seq, n)
        return budget - demand

    def _loop_exact(self, plan: StepPlan, budget: int, threshold: int) -> int:
        """The running loop request by request when chunks are under way (RULES.md R3, R6).

        Blocks are taken per request as it is reached; when they are short, victims are
        preempted until they fit or the request itself was the victim. A victim scheduled
        earlier in the step gives its tokens back. Chunks are applied after the loop."""
        pool = self.pool
        block_size = self._block_size
        tick = self._open_pass(plan)
        members = in_admission_order(self.running, self.prefilling)
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
        pool = self.pool
        waiting = self.waiting
        block_size = self._block_size
        chunked = self._chunked
        full_isl = self._full_isl
        prefix = self.prefix
        self._stopped_at = None
        while budget > 0 and (len(self.running) + len(self.prefilling) + len(self.departing)
                              < self._max_num_seqs):
            seq = waiting.peek()
            if seq is None or self._head_stops(seq, budget):
                break
            tokens = seq.prompt_len + seq.generated
            hit = cost = 0
            if prefix is not None:
                hit = prefix.match(seq)
                cost = prefix.hit_cost(seq, hit)
            present = self._kv_present(seq, hit)
            todo = tokens - present
            n = threshold if 0 < threshold < todo else todo
            if not chunked and n > budget:
                self._stopped_at = (seq, f"needs {n} tokens", budget)
                break
            n = min(n, budget)
            # The watermark applies only when something else is running (has_scheduled_reqs).
            floor = (pool.watermark_blocks if self.running or self.prefilling or self.departing
                     else 0)
            held = hit // block_size
            whole = blocks_for(tokens, block_size) - held + cost
            if full_isl and whole + floor > pool.free:
                self._stopped_at = (seq, f"needs {whole} blocks", budget)
                break
            need = blocks_for(present + n, block_size) - held
            if need + cost + floor > pool.free:
                self._stopped_at = (seq, f"needs {need + cost} blocks", budget)
                break
            self._start_prefill(plan, seq, need, tokens, n, hit)
            budget -= n
