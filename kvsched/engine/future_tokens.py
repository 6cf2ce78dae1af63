"""SGLang's future-token admission (`kvsched.reservation`) as the scheduler drives it: the free
tokens it counts, the decoding requests it reserves for, its re-estimate after a decode pass,
and its priority preemption. Any step order takes it (the `sglang` preset: prefill first)."""

from __future__ import annotations

from typing import Protocol

from kvsched.blocks import BlockPool
from kvsched.engine.plan import StepPlan
from kvsched.reservation import FutureTokenReservation
from kvsched.sequence import Seq


class Scheduler(Protocol):
    """What the gate reads and does of the scheduler (`kvsched.engine.mechanism`)."""

    running: dict[int, Seq]
    prefilling: dict[int, Seq]
    pool: BlockPool
    tick: int
    reservation: FutureTokenReservation | None
    _block_size: int

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
    # has run in this step yet, so it is the start of the next one.
    sched.tick += 1
    for victim in chosen:
        sched._preempt(victim, plan, cause=seq)
    sched.tick -= 1
    victims.update(chosen)
    return True

def free_tokens(sched: Scheduler) -> int:
    """Free KV tokens as SGLang counts them: a prefill under way holds only the chunks
    computed so far (kvsched allocates its whole prompt at admission)."""
    block_size = sched._block_size
    free = sched.pool.free * block_size
    for seq in sched.prefilling.values():
        done = seq.prompt_len + seq.generated - seq.prefill_left
        free += seq.blocks * block_size - -(-done // block_size) * block_size
    return free

def decoding_pairs(sched: Scheduler, back: int,
                   plan: StepPlan | None = None) -> list[tuple[int, int]]:
    """(generated, output_len) of each decoding request, `back` passes ago; a prefill
    that completes in `plan` is not decoding yet."""
    tick = sched.tick - back
    done = {seq for seq, _ in plan.prefills} if plan is not None and plan.prefills else ()
    return [(seq.base + tick, seq.output_len) for seq in sched.running.values()
            if seq not in done]

def after_decode(sched: Scheduler, plan: StepPlan, retracted: bool) -> None:
    """SGLang's update_running_batch: a retraction re-estimates the ratio from the
    requests left (their tokens before this pass), else it decays."""
    assert sched.reservation is not None
    sched.reservation.after_decode(retracted, decoding_pairs(sched, 1) if retracted else ())
