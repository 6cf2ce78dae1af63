"""The mechanism every engine family's rules assemble steps from: the waiting queue, the running
and prefilling sets, the block pool (and prefix cache), budgets, preemption and the decode
clock's bookkeeping. It holds no step order: `kvsched.engine.rules` has one subclass per
engine family, whose `_assemble` decides a step from these operations.

`schedule()` decides one step and returns it as a `StepPlan`; it allocates and frees blocks
and moves requests between queues, as vLLM's scheduler does. `postprocess()` applies the
step's outcome once its end time is known: tokens, first tokens, finishes. The decode
clock's stretches (`kvsched.engine.stretch`) jump over the pure-decode steps between.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import chain

from kvsched.blocks import BlockPool, blocks_for
from kvsched.config import EngineConfig, PreemptionMode, PrefixAccounting, Requeue, Victim
from kvsched.engine import future_tokens
from kvsched.engine.gaps import GapTracker
from kvsched.engine.plan import Event, StepPlan
from kvsched.engine.texts import V0_PREEMPTION_WARNING
from kvsched.kinds import EventKind, Reason
from kvsched.kvcache.tracker import PrefixTracker, make_tracker
from kvsched.partial_prefills import make_partial_prefills
from kvsched.policies.base import Policy
from kvsched.policies.fcfs import Fcfs
from kvsched.policies.priority import PriorityFirst
from kvsched.reservation import make_reservation
from kvsched.sequence import Seq, SeqState
from kvsched.waiting import WaitingQueue

# (Module constants: an enum member read through its class costs a lookup in Python 3.11.)
RUNNING = SeqState.RUNNING
PREFILLING = SeqState.PREFILLING
WAITING = SeqState.WAITING
SWAPPED = SeqState.SWAPPED
PREEMPTED = SeqState.PREEMPTED
FINISHED = SeqState.FINISHED
ADMIT = EventKind.ADMIT
FINISH = EventKind.FINISH
PREEMPT = EventKind.PREEMPT
SWAP_OUT = EventKind.SWAP_OUT
SWAP_IN = EventKind.SWAP_IN
FRONT = Requeue.FRONT
BACK = Requeue.BACK
QUEUE_TAIL = Victim.QUEUE_TAIL
LAST_ADMITTED = Victim.LAST_ADMITTED
LOWEST_PRIORITY = Victim.LOWEST_PRIORITY


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
        # vLLM V1's priority heap breaks (priority, arrival) ties by request id
        self.waiting.ties_by_id = (config.requeue is Requeue.BY_POLICY
                                   and isinstance(policy, PriorityFirst))
        # Prefix caching: blocks with identity beside the counts (kvsched.kvcache.tracker).
        self.prefix: PrefixTracker | None = make_tracker(config, self.pool)
        self._v0_prefix = config.prefix_accounting is PrefixAccounting.V0
        # vLLM V0 chunks with prefix caching in whole blocks of the budget, decodes too
        # (`_chunk_new_tokens_to_schedule`: a pass stops when less than a block is left)
        self._v0_round = (self._v0_prefix and config.chunked_prefill
                          and self.prefix is not None)
        if self._v0_prefix and self.prefix is not None and self.prefix.eager:
            self.prefix.v0 = True  # V0: a step's new blocks count as cached from the next on
        self._releases: list[Seq] = []  # finished in this step, blocks not yet released
        self._dynamic = bool(getattr(self.waiting, "dynamic", False))  # re-ranked each step
        self.reservation = make_reservation(config)  # SGLang's admission rule, or None
        if self.reservation is not None and self.prefix is not None:
            self.prefix.stepped = self.prefix.radix is not None  # SGLang's step: its tree
        self.partial = make_partial_prefills(config)  # vLLM V0's partial prefills, or None
        # vLLM V0's priority: an arrival-order queue, sorted in steps without a prefill
        self._v0_priority = config.priority_preemption and isinstance(policy, PriorityFirst)
        if self._v0_priority or not config.priority_orders_queue:
            self.waiting = WaitingQueue(Fcfs())  # in arrival order
        if self.partial is not None:  # the threshold then classifies prompts, caps no chunk
            self._chunk_cap = config.max_num_batched_tokens
        # The config's switches the hot path reads, as typed fields (the compiled build reads
        # them as C values; the config is a dataclass).
        self._chunked = config.chunked_prefill
        self._max_num_seqs = config.max_num_seqs
        self._worst_case = config.append_free_block
        self._has_delay = bool(config.delay_factor)
        self._admit_after_preempt = config.admit_after_preempt
        self._swap_in_after_preempt = config.swap_in_after_preempt
        self._prefill_past_swapped = config.prefill_past_swapped
        self._readmit_victims = config.readmit_victims
        self._swap = config.preemption is PreemptionMode.SWAP
        self._swap_prefills = config.swap_prefills
        self._swapped_fifo = config.swapped_fifo
        self._swap_in_front = config.swap_in_front
        self._warn_preemptions = config.preemption_warning
        self._full_isl = config.scheduler_reserve_full_isl
        self._long_threshold = config.long_prefill_token_threshold
        # False: every step through the request-by-request loops (the exact path, to check
        # the O(changes) ones against; the engine's `stretches=False`)
        self.fast_loops = True
        # Async scheduling (vLLM V1's AsyncScheduler: its rules module turns it on): the step
        # is decided while the one before it runs, so requests that finished in that step
        # still hold their blocks and places (`departing`) and requests that arrived while it
        # ran (`late`) wait for the next decision. `in_flight`: a step ran and no idle one
        # since (an arrival now comes while the next step is already decided).
        self._async = False
        self.departing: list[Seq] = []
        self.late: list[Seq] = []
        self.in_flight = False
        self._learned = False  # finishes or arrivals came in after the last decision

    # -- arrivals turned away ----------------------------------------------------------

    def reject(self, seq: Seq, step: int, reason: Reason) -> None:
        request = seq.request
        seq.state = SeqState.REJECTED
        seq.end_reason = reason
        self.events.append((step, request.arrival_time, request.request_id, EventKind.REJECT,
                            reason))
        if self.on_done is not None:
            self.on_done(seq)

    # -- one step -------------------------------------------------------------------------

    def schedule(self, step: int, now: float) -> StepPlan:
        """Decide step `step`, starting at `now`."""
        plan = StepPlan(step, now)
        if self._dynamic:
            self.waiting.reorder(now, self.prefix)
        if self._has_delay:
            self._delay_passed = self._passed_delay(now)
        if self._swapped_in:
            self._swapped_in.clear()
        if self.prefix is not None and self.prefix._middle:
            self.prefix.stash()  # SGLang's tree: the last step's middle chunk
        self._assemble(plan)
        if self.prefix is not None and self.prefix._fresh:
            self.prefix.step_ended()  # V0: what this step hashed is computed from now on
        if self.reservation is not None and not self.waiting.size and plan.is_idle:
            self.reservation.idle()  # SGLang's on_idle, fully idle: the ratio restarts
        if plan.prefills:
            self._prev_prompt = True
        return plan

    def _assemble(self, plan: StepPlan) -> None:
        """Assemble the step from the mechanism's operations: each engine family's rules
        (`kvsched.engine.rules`) say in which order."""
        raise NotImplementedError

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
        if plan.num_finished and self.reservation is not None:
            self.reservation.left_batch()  # requests left the batch (decode or prefill)
        if self.prefix is not None and self.prefix.stepped:
            self.prefix.settle(self._releases)  # SGLang's tree: the step's inserts, in order
        elif self._releases:
            self._release_finished()

    def _release_finished(self) -> None:
        """Give the cache the blocks of the requests that finished in the step, in the
        order the step scheduled them (vLLM frees them so: RULES.md P6, an earlier free is
        evicted first)."""
        prefix = self.prefix
        assert prefix is not None
        releases = self._releases
        releases.sort(key=admission_key)
        for seq in releases:
            prefix.release(seq, seq.prompt_len + seq.output_len - 1)
        releases.clear()

    @property
    def hol_head(self) -> Seq | None:
        """The head of the waiting queue while it blocks a request behind it."""
        return self._hol_head

    def _waiting_may_admit(self) -> bool:
        """With requests waiting, whether a rule may admit one mid-stretch (no stretch)."""
        if self._learned:
            return True  # async: blocks, seats or arrivals came after the last decision
        if self._has_delay:
            return True  # the delay passes with time alone: admissions may open mid-stretch
        if self._v0_priority:
            return True  # a shrinking pool may make a worse running request a victim
        if self._dynamic:
            return True  # the order changes with time and the cache: a new head may fit
        if self.prefix is not None and not self._chunked:
            return True  # an eviction may lengthen a waiting prompt's uncached part
        reservation = self.reservation
        # The batch stopped being full, or a head may preempt: it may admit.
        return reservation is not None and (
            reservation.reopened or reservation.preemption_threshold is not None)

    def generated(self, seq: Seq) -> int:
        """Tokens `seq` has produced so far."""
        return seq.base + self.tick if seq.state is RUNNING else seq.generated

    def close_all_runs(self) -> None:
        """Settle the lazy counters of requests still running when a run stops early (and
        let the finished that had not left yet leave)."""
        for seq in self.running.values():
            seq.generated = seq.base + self.tick
            self._close_run(seq, self.tick)
        self._depart()

    # -- decodes ------------------------------------------------------------------------

    def decode_need(self) -> int:
        """Budget a decode needs to be scheduled (it then takes one token): one, or under
        vLLM V0's chunking with prefix caching a whole block of what is left and of the
        partial-prefill slot (else none decodes: more than the budget)."""
        if not self._v0_round:
            return 1
        slot = self._budget if self.partial is None else self.partial.slot
        return self._block_size if slot >= self._block_size else self._budget + 1

    def _decode(self, plan: StepPlan, budget: int) -> int:
        running = self.running
        n = len(running)
        if not n:
            return budget
        self.tick += 1
        tick = plan.tick = self.tick
        due = self._block_due.pop(tick, None)
        growing = [seq for seq, epoch in due if seq.epoch == epoch] if due else []
        if (n > budget or (self._v0_round and n > budget - self.decode_need() + 1)
                or len(growing) > self.pool.free - self._append_floor):
            return self._decode_exact(plan, budget, tick)
        prefix = self.prefix
        if growing:
            for seq in growing:
                seq.blocks += 1
            if prefix is None:
                self.pool.allocate(len(growing))
            else:
                prefix.grow_each(growing)
            for seq in growing:
                self._push_block_due(seq)
        if prefix is not None:
            prefix.decode_pass(n)
        if self.prefix is not None and self.prefix.eager:
            fills = self._block_due.get(tick + 1)  # their last block fills in this pass
            if fills:
                self.prefix.filled_each([seq for seq, epoch in fills if seq.epoch == epoch])
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
        if prefix is None or not prefix.eager:
            return
        if prefix.lagged:  # async: the block its last pass filled, as it takes the next one
            if grew:
                prefix.computed(seq, (seq.blocks - 1) * self._block_size)
        elif not (seq.prompt_len + seq.base + tick - 1) % self._block_size:
            prefix.filled(seq)

    def _decode_exact(self, plan: StepPlan, budget: int, tick: int) -> int:
        """The lesson's loop, request by request, for passes that cannot be decided in bulk."""
        block_size = self._block_size
        pool = self.pool
        worst_case = self._worst_case
        need = self.decode_need()
        decoded: list[Seq] = []
        for seq in list(self.running.values()):
            if seq.state is not RUNNING:
                continue  # preempted as a victim earlier in this pass
            if budget < need:
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
        if self.prefix is not None:
            self.prefix.decode_pass(len(decoded))
        return budget

    def _settle_pass(self, plan: StepPlan, tick: int, decoded: list[Seq]) -> None:
        """After an exact decode pass: who was left out stands still (its lazy counters
        move back a pass), and the plan counts who decoded."""
        if len(decoded) == len(self.running):  # (decoded is a subset): all of them decoded
            # each read its context and the token it decodes: the KV held, plus one each
            plan.kv_read_tokens += self.kv_tokens + len(decoded)
        else:
            for seq in self.running.values():
                if seq.decoded_tick != tick:  # left out this pass: its counters stand still
                    seq.base -= 1
                    seq.epoch += 1
                    self._close_run(seq, tick - 1)
                    seq.run_tick = tick + 1
                    self.gaps.want(seq.run_tick, seq)
                    self._push_block_due(seq)
                    self._push_finish_due(seq)
            kv = 0
            for s in decoded:
                kv += s.prompt_len + s.base + tick - 1
            plan.kv_read_tokens += kv
        plan.num_decodes = len(decoded)
        self.kv_tokens += len(decoded)
        if self.record_batches:
            plan.decoded = decoded

    def _pick_victim(self) -> Seq:
        rule = self._victim
        if rule is QUEUE_TAIL:
            queue = self.prefilling or self.running
            return next(reversed(queue.values()))
        if rule is LAST_ADMITTED:  # both queues are in admission order
            tails = [next(reversed(q.values())) for q in (self.running, self.prefilling) if q]
            tails.extend(self.departing)  # async: finished, still in vLLM's running list
            return max(tails, key=admission_key)
        candidates = chain(self.running.values(), self.prefilling.values(), self.departing)
        if rule is LOWEST_PRIORITY:  # vLLM V1's max(running, key=(priority, arrival))
            # returns the first of equal keys in its running list: the earliest admitted
            return max(candidates,
                       key=lambda s: (s.request.priority, s.request.arrival_time, -s.admit_seq))
        tick = self.tick - 1  # counts as at the start of this pass
        return min(candidates, key=lambda s: (
            s.base + tick if s.state is RUNNING else s.generated, -s.prompt_len, -s.admit_seq))

    def _preempt(self, victim: Seq, plan: StepPlan, cause: Seq) -> None:
        if victim.state is FINISHED:
            self._preempt_departing(victim, plan, cause)
            return
        tick = self.tick
        request = victim.request
        was_decoding = victim.state is RUNNING
        if was_decoding:
            victim.generated = victim.base + tick - 1  # its decode in this pass is undone
            computed = victim.prompt_len + victim.generated - 1
            if self._async and victim.run_tick < tick:
                computed -= 1  # its decode of the step before is in flight: not cached yet
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
            if not (self._swap_prefills and self._swap):
                victim.recompute_upto = max(victim.recompute_upto, done)
                victim.prefill_left = 0
        victim.v0_cached = -1  # (V0 stops tracking it: counted again when looked at)
        if self.prefix is not None:  # its computed blocks stay cached: it may find them again
            self.prefix.preempted(victim, computed, len(self.running) + len(self.prefilling),
                                  plan.tick == tick and tick > 0)  # a decode pass's victim
        else:
            self.pool.release(victim.blocks)
        self.committed_blocks -= victim.lifetime_blocks
        victim.epoch += 1
        victim.num_preemptions += 1
        plan.preempted.append(victim)
        swap = self._swap and (was_decoding or self._swap_prefills)
        if self._warn_preemptions and self._num_cumulative_preemption % 50 == 0:
            mode = "SWAP" if swap else "RECOMPUTE"
            self.events.append((plan.step, plan.time, request.request_id, EventKind.WARNING,
                                V0_PREEMPTION_WARNING.format(
                                    request.request_id, mode,
                                    self._num_cumulative_preemption + 1)))
        self._num_cumulative_preemption += 1
        mode = "swap" if swap else "recompute"
        self.events.append((plan.step, plan.time, request.request_id, PREEMPT,
                            f"{mode}; {victim.blocks} blocks freed for "
                            f"{cause.request.request_id}"))
        if swap:
            victim.state = SWAPPED
            victim.host_blocks = victim.blocks
            victim.num_swapped_blocks += victim.blocks
            plan.swapped_out_blocks += victim.blocks
            self.events.append((plan.step, plan.time, request.request_id, SWAP_OUT,
                                f"{victim.blocks} blocks"))
        else:
            victim.state = PREEMPTED
        victim.blocks = 0
        requeue = self._requeue
        if swap and self._swapped_fifo:
            self.waiting.push_swapped(victim)
        elif requeue is FRONT:
            self.waiting.push_front(victim)
        elif requeue is BACK:
            self.waiting.push(victim, plan.time)
        else:  # as vLLM V1's priority heap: its original (priority, arrival) place
            self.waiting.push(victim, request.arrival_time)

    def _preempt_departing(self, victim: Seq, plan: StepPlan, cause: Seq) -> None:
        """Async scheduling: the victim is a request whose last token is in flight (vLLM's
        running list still holds it). Its blocks are freed now; the token, delivered after
        the step is decided, finishes it from the waiting queue (vLLM 0.33
        `_update_request_with_output` on stale output, then `check_stop`): it never runs
        again, and counts a preemption."""
        self.departing.remove(victim)
        computed = victim.prompt_len + victim.output_len - 2  # its last decode still in flight
        if self.prefix is not None:
            self.prefix.preempted(victim, computed)
        else:
            self.pool.release(victim.blocks)
        self.committed_blocks -= victim.lifetime_blocks
        victim.num_preemptions += 1
        plan.preempted.append(victim)
        self.events.append((plan.step, plan.time, victim.request.request_id, PREEMPT,
                            f"recompute; {victim.blocks} blocks freed for "
                            f"{cause.request.request_id}"))
        victim.blocks = 0
        if self.on_done is not None:
            self.on_done(victim)

    def _open_pass(self, plan: StepPlan) -> int:
        """Start the step's decode pass for a loop that takes blocks request by request (so
        the lazy growth due at this pass is dropped): its tick, 0 when nothing runs."""
        if not self.running:
            return 0
        self.tick += 1
        tick = plan.tick = self.tick
        self._block_due.pop(tick, None)
        return tick

    def _end_pass(self, plan: StepPlan, tick: int, decoded: list[Seq],
                  chunks: dict[Seq, int]) -> None:
        """A walk of the running requests is over: settle its decodes (when the pass
        decoded any: `tick`), then run the prefill chunks it granted."""
        if tick:
            self._settle_pass(plan, tick, decoded)
        for seq, n in chunks.items():
            self._prefill_chunk(plan, seq, n)

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
        worst_case = self._worst_case
        limit = None
        if self.reservation is not None:  # SGLang caps the continued chunk by memory left
            limit = self.reservation.continue_limit(future_tokens.decoding(self, plan),
                                                    self.tick, future_tokens.free_tokens(self))
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
        pool = self.pool
        waiting = self.waiting
        block_size = self._block_size
        chunked = self._chunked
        max_num_seqs = self._max_num_seqs
        self._stopped_at = None
        reservation = self.reservation if allow_prefill else None
        partial = self.partial
        past_swapped = self._prefill_past_swapped
        readmit = self._readmit_victims
        front: list[Seq] = []  # swapped in, to lead the running queue
        aside: list[tuple] = []
        if reservation is not None and not reservation.open_round(
                future_tokens.decoding(self, plan), self.tick, plan.prefills, len(waiting)):
            return budget
        if reservation is not None and self.prefix is not None:
            future_tokens.refresh_waiting(self, plan)
        preempting = reservation is not None and reservation.preemption_threshold is not None
        victims: set[Seq] = set()
        granted: Seq | None = None  # the head whose preemptions already made room
        opened = budget > 0 and self._delay_passed  # (vLLM V0 then walks the waiting queue)
        while (budget > 0 or reservation is not None) and (
                len(self.running) + len(self.prefilling) < max_num_seqs or preempting):
            seq = waiting.peek()
            if seq is None:
                break
            if reservation is not None and not reservation.may_try(future_tokens.free_tokens(self)):
                break  # SGLang's budget_state before each request
            if self._head_stops(seq, budget):
                break
            if preempting:
                if seq in victims:  # SGLang re-queues them after the round
                    aside.append(waiting.set_aside())
                    continue
                if seq is not granted:
                    if not future_tokens.priority_preempt(self, plan, seq, max_num_seqs, victims):
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
                if self._swap_in_front:  # V0 chunked: swap-ins lead the running queue
                    front.append(seq)
                plan.swapped_in_blocks += seq.host_blocks
                seq.num_swapped_blocks += seq.host_blocks
                self.events.append((plan.step, plan.time, request.request_id, SWAP_IN,
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
                cost = 0
                counted = 0  # the cached tokens it does not compute
                if self.prefix is not None:
                    hit = counted = self.prefix.match(seq, True, self._v0_prefix)
                    need, cost = self._blocks_with_hit(seq, need, hit)
                    if self._v0_prefix:
                        gate = blocks_for(tokens, block_size)
                        counted = self.v0_counted(seq, self.prefix.computed_count(seq, hit))
                    else:
                        gate = need
                # what the prefill computes: its KV present is the hit (V0: its count) or
                # more, received or loaded (`_kv_present`); a prompt all present computes
                # its last token again (V0: _get_num_new_uncached_and_cached_tokens)
                present = self._kv_present(seq, counted)
                todo = tokens - present if present < tokens else 1
                cap = todo if partial is None else partial.slot
                if reservation is not None:
                    # SGLang pins the hit while it checks: its idle tokens are not free
                    allowed = reservation.check(
                        seq, todo, future_tokens.free_tokens(self) - cost * block_size)
                    if allowed is None:
                        break
                    cap = min(cap, allowed)
                if chunked and self._v0_round:  # V0: whole blocks of the budget and slot
                    slot = self._budget if partial is None else partial.slot
                    chunk = min(todo, min(budget, slot) // block_size * block_size)
                    if not chunk:
                        self._stopped_at = (seq, f"needs {block_size} tokens", budget)
                        break
                elif chunked:
                    chunk = min(todo, budget, self._chunk_cap, cap)
                elif todo > budget:
                    self._stopped_at = (seq, f"needs {todo} tokens", budget)
                    break
                else:
                    chunk = todo
                if not pool.can_admit(gate):
                    self._stopped_at = (seq, f"needs {gate} blocks", budget)
                    break
                fresh = need - cost if self.prefix is not None else need
                self._start_prefill(plan, seq, fresh, tokens, chunk, hit, counted, present)
                budget -= chunk
                if partial is not None:
                    partial.admitted(seq)
                if reservation is not None and not reservation.admitted(
                        seq, todo, chunk, future_tokens.free_tokens(self)):
                    break
        if self._v0_prefix and allow_prefill and opened and self.prefix is not None:
            self._v0_look(plan, readmit)
        if reservation is not None:
            reservation.close_round(len(self.running) + len(self.prefilling) >= max_num_seqs,
                                    len(waiting))
        if aside:
            waiting.restore(aside)
        if front:  # ahead of every running request: decodes, then prefills, in their order
            front.sort(key=self._swapped_in.__contains__)
            self._front_admissions -= len(front)
            for i, seq in enumerate(front):
                seq.admit_seq = self._front_admissions + i
            self.running = by_admission(self.running)
        return budget

    def _v0_look(self, plan: StepPlan, readmit: bool) -> None:
        """vLLM V0's admission loop counts the cached tokens of the head it stops at before it
        checks the budget, the seats and the blocks (`_schedule_prefills`): that count holds
        from then on (`v0_counted`), even when the loop stopped for want of budget or seats."""
        seq = self.waiting.peek()
        if seq is None or seq.state is SWAPPED or seq.v0_cached >= 0:
            return
        if not readmit and seq in plan.preempted:
            return  # V0 holds this step's victims back (it never reaches them)
        if self.partial is not None and not self.partial.can_schedule(seq):
            return
        assert self.prefix is not None
        self.v0_counted(seq, self.prefix.computed_count(seq, self.prefix.match(seq, False, True)))

    def v0_counted(self, seq: Seq, hit: int) -> int:
        """vLLM V0's cached-token count of a prompt: taken (from the cache now, `hit`) when
        the scheduler first looks at it, then kept while it waits and prefills, even if
        the cache changed (ComputedBlocksTracker.get_num_cached_tokens); a preemption
        forgets it."""
        if seq.v0_cached < 0:
            seq.v0_cached = hit
        return seq.v0_cached

    def _kv_present(self, seq: Seq, hit: int) -> int:
        """Tokens of `seq`'s next prefill whose KV is there at admission: its prefix-cache
        hit, extended by the blocks the host tier holds after it (`engine.kv_offload`), or
        the prompt KV another instance sent (a P/D decode). Both are what vLLM's scheduler
        takes from a KV connector (its offloading connector, or a P/D one): external tokens
        counted as computed (`get_num_new_matched_tokens`), all but the last prompt token,
        recomputed for its logits (`_update_waiting_for_remote_kv`). They take fresh blocks
        like computed ones; only `hit` comes from the GPU cache."""
        present = hit
        prefix = self.prefix
        if prefix is not None and prefix.host is not None:  # the host tier's run past the hit
            present += prefix.host_extend(seq, hit)
        remote = seq.remote_tokens
        if remote >= seq.prompt_len:
            remote = seq.prompt_len - 1
        return remote if remote > present else present

    def _start_prefill(self, plan: StepPlan, seq: Seq, blocks: int, tokens: int,
                       chunk: int, hit: int = 0, counted: int = -1,
                       present: int = -1) -> None:
        """Admit the head for a (re)prefill of `tokens`, `hit` of them found cached (or more
        received: `_kv_present`) and `chunk` computed now; it takes `blocks` fresh blocks
        (beside its hit blocks). `counted`: the cached tokens it counts, if not `hit` (vLLM
        V0's count, taken when it first looked at the prompt); `present`: its KV there, if
        the caller has it (`_kv_present`); a prompt all present computes its last token
        again."""
        if counted < 0:
            counted = hit
        first = seq.prefix_hit_tokens is None
        if present < 0:
            present = self._kv_present(seq, counted)  # (before the admission changes the cache)
        if present >= tokens:
            present = tokens - 1
        loaded = present - counted if present > counted and not seq.remote_tokens else 0
        if loaded:  # read back from the host tier (before its allocation spills more there)
            assert self.prefix is not None
            self.prefix.host_load(seq, hit, loaded, first)
            plan.loaded_blocks += loaded // self._block_size  # the step pays the transfer
        self._take_head(plan, seq, blocks, hit)
        if self.prefix is not None and self.prefix.v0:
            self.prefix.computed(seq, tokens)  # V0 hashes all its full blocks as it allocates
        cached = counted if counted < present else present
        seq.prefill_left = tokens - present
        if seq.first_scheduled_time is None:
            seq.first_scheduled_time = plan.time
        if seq.prefix_hit_tokens is None:
            seq.prefix_hit_tokens = cached
        seq.cached_tokens += cached
        kind = "recompute" if seq.state is PREEMPTED else "prefill"
        detail = f"{kind} {tokens} tokens"
        if cached:
            detail += f", {cached} cached"
        if present > counted and seq.remote_tokens:
            detail += f", {present} received"
            seq.remote_tokens = 0  # spent: a recompute after a preemption computes them
        elif loaded:
            detail += f", {loaded} from host"
        if chunk < tokens - present:
            detail += f", first chunk {chunk}"
        self.events.append((plan.step, plan.time, seq.request.request_id, ADMIT, detail))
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
            self.running = by_admission(running)
        self.kv_tokens += seq.prompt_len + seq.generated
        plan.produced.append(seq)

    # -- bookkeeping ------------------------------------------------------------------

    def _finish(self, seq: Seq, step: int, end_time: float) -> None:
        seq.state = FINISHED
        seq.generated = seq.output_len
        seq.finish_time = end_time
        self.kv_tokens -= seq.prompt_len + seq.output_len - 1
        del self.running[seq.index]
        seq.epoch += 1
        self.events.append((step, end_time, seq.request.request_id, FINISH,
                            f"{seq.output_len} tokens"))
        if self._async:  # the scheduler learns it after deciding the next step
            self.departing.append(seq)
        else:
            self._leave(seq)

    def _leave(self, seq: Seq) -> None:
        """A finished request gives back its blocks (its answer's full blocks join the
        cache at the step's end) and its place."""
        if self.prefix is not None:
            self._releases.append(seq)
        else:
            self.pool.release(seq.blocks)
        self.committed_blocks -= seq.lifetime_blocks
        seq.blocks = 0
        if self.on_done is not None:
            self.on_done(seq)

    def _depart(self) -> None:
        """Async scheduling: the step decided, the requests that finished in the step before
        it leave (vLLM frees them in update_from_output, after schedule()); the requests that
        arrived while it was decided join the queue, in arrival order."""
        departing = self.departing
        if departing:
            self.departing = []
            self._learned = True
            for seq in departing:
                self._leave(seq)
            if self._releases:
                self._release_finished()
        late = self.late
        if late:
            self.late = []
            self._learned = True
            waiting = self.waiting
            for seq in late:
                waiting.push(seq, seq.request.arrival_time)

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


def admission_key(seq: Seq) -> int:
    return seq.admit_seq


def _item_admit_seq(item: tuple[int, Seq]) -> int:
    return item[1].admit_seq


def in_admission_order(first: dict[int, Seq], second: dict[int, Seq]) -> list[Seq]:
    """The requests of two queues each in admission order (the running and the prefilling
    sets), merged into one list in admission order: one pass, not a sort."""
    merged: list[Seq] = []
    left = list(first.values())
    right = list(second.values())
    i = j = 0
    while i < len(left) and j < len(right):
        a, b = left[i], right[j]
        if b.admit_seq < a.admit_seq:
            merged.append(b)
            j += 1
        else:
            merged.append(a)
            i += 1
    merged.extend(left[i:])
    merged.extend(right[j:])
    return merged


def by_admission(queue: dict[int, Seq]) -> dict[int, Seq]:
    """`queue` (a running or prefilling set) in admission order."""
    return dict(sorted(queue.items(), key=_item_admit_seq))
