"""SGLang's future-token admission (`kvsched.reservation`) as the scheduler drives it: the free
tokens it counts, the decoding requests it reserves for, its re-estimate after a decode pass,
and its priority preemption. Any step order takes it (the `sglang` preset: prefill first)."""

from __future__ import annotations

from typing import Protocol

from kvsched.blocks import BlockPool
from kvsched.engine.plan import StepPlan
from kvsched.kvcache.tracker import PrefixTracker
from kvsched.reservation import FutureTokenReservation
from kvsched.sequence import Seq
from kvsched.waiting import WaitingQueue


class Scheduler(Protocol):
    """What the gate reads and does of the scheduler (`kvsched.engine.mechanism`)."""

    running: dict[int, Seq]
    prefilling: dict[int, Seq]
    pool: BlockPool
    tick: int
    reservation: FutureTokenReservation | None
    prefix: PrefixTracker | None
    waiting: WaitingQueue
    _block_size: int
    _max_num_seqs: int

    def _preempt(self, victim: Seq, plan: StepPlan, cause: Seq) -> None: ...


def priority_preempt(sched: Scheduler, plan: StepPlan, seq: Seq, max_num_seqs: int,
                      victims: set[Seq]) -> bool:
    """SGLang's priority scheduling: a head that finds the batch full (no request slot
    free, or a preemption for it earlier in the round; the round starts with the latch
    clear) preempts worse running requests (added to `victims`), or the round ends."""
    reservation = sched.reservation
    assert reservation is not None
    if len(sched.running) + len(sched.prefilling) >= max_num_seqs:
        reservation.batch_is_full = True
    if not reservation.batch_is_full:
        return True
    # Only the running batch can be preempted: not what this step admitted or swapped in.
    new = {s for s, _ in plan.prefills}.union(plan.swap_ins)
    running = [(s, s.base + sched.tick) for s in sched.running.values() if s not in new]
    chosen = reservation.priority_victims(seq, running, free_tokens(sched))
    if chosen is None:
        return False
    # _preempt counts a decoding victim as at the start of the pass under way; no pass
    # has run in this step yet, so it is the start of the next one. SGLang releases the
    # victims in the batch's order (schedule_policy.py line 1765).
    sched.tick += 1
    taken = set(chosen)
    for victim, _done in running:
        if victim in taken:
            sched._preempt(victim, plan, cause=seq)
    sched.tick -= 1
    victims.update(chosen)
    return True


WAITING_PREFIX_MATCH_MAX = 128  # schedule_policy.py WAITING_QUEUE_PREFIX_MATCH_MAX


def refresh_waiting(sched: Scheduler, plan: StepPlan) -> None:
    """SGLang's `_touch_waiting_prefixes` (`schedule_policy.py` line 282, the radix cache
    with LRU and FCFS): a round that reaches `calc_priority` (a request slot free, or a
    chunked prefill going on) with requests waiting counts; the first and every 32nd after
    touch the first 128 waiting requests' whole sequences, the head last. A cache-aware
    policy (`lpm`, `hrrn`, `dfs-weight`) matches them instead (line 236, not modelled), unless
    `lpm` or `hrrn` run as FCFS above 128 waiting (`_determine_active_policy`, line 304)."""
    reservation = sched.reservation
    prefix = sched.prefix
    assert reservation is not None and prefix is not None
    if not prefix.stepped:
        return
    queue = sched.waiting
    if queue.dynamic:
        above = getattr(queue._policy, "fcfs_above", None)
        if above is None or queue.size <= above:
            return
    if (len(sched.running) + len(sched.prefilling) >= sched._max_num_seqs
            and not plan.prefills):
        return  # scheduler.py line 4118: full slots end a round with no chunk going on
    if reservation.refresh_due():
        waiting: list[Seq] = []
        for seq in queue:
            if len(waiting) == WAITING_PREFIX_MATCH_MAX:
                break
            waiting.append(seq)
        prefix.refresh(waiting)


def free_tokens(sched: Scheduler) -> int:
    """Free KV tokens as SGLang counts them: a prefill under way holds only the chunks
    computed so far (kvsched allocates its whole prompt at admission)."""
    block_size = sched._block_size
    free = sched.pool.free * block_size
    for seq in sched.prefilling.values():
        done = seq.prompt_len + seq.generated - seq.prefill_left
        free += seq.blocks * block_size - -(-done // block_size) * block_size
    return free


def decoding(sched: Scheduler, plan: StepPlan | None = None) -> list[Seq]:
    """The decoding requests, in the batch's order (their generated count: `base` plus the
    decode clock); a prefill that completes in `plan` is not decoding yet."""
    running = sched.running
    if plan is None or not plan.prefills:
        return list(running.values())
    done = {seq for seq, _ in plan.prefills}
    return [seq for seq in running.values() if seq not in done]


def after_decode(sched: Scheduler, plan: StepPlan, retracted: bool) -> None:
    """SGLang's update_running_batch: a retraction re-estimates the ratio from the
    requests left (their tokens before this pass), else it decays."""
    assert sched.reservation is not None
    left: list[tuple[int, int]] = []
    if retracted:
        tick = sched.tick - 1
        left = [(seq.base + tick, seq.output_len) for seq in decoding(sched)]
    sched.reservation.after_decode(retracted, left)
