"""Head-of-line blocking: the waiting head cannot be admitted while the request behind it could.

Only transitions become events (`hol_block` when a head starts blocking, `hol_release` when
it stops), so the cost per step is a peek at the second request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsched.blocks import blocks_for
from kvsched.kinds import EventKind
from kvsched.sequence import SeqState

if TYPE_CHECKING:
    from kvsched.engine.mechanism import Scheduler
    from kvsched.engine.plan import StepPlan
    from kvsched.sequence import Seq

SWAPPED = SeqState.SWAPPED  # (an enum member read through its class: a lookup in Python 3.11)


def track(sched: Scheduler, plan: StepPlan) -> None:
    """Record head-of-line blocking: the head cannot be admitted, the next one could.

    Only transitions become events (`hol_block` when a head starts blocking, `hol_release`
    when it stops), so the cost per step is a peek at the second request."""
    stop = sched._stopped_at
    blocking = None
    if stop is not None:
        head, why, budget = stop
        behind = sched.waiting.second()
        if behind is not None and fits(sched, behind, budget):
            blocking = (head, why, budget, behind)
    current = sched._hol_head
    if blocking is not None and blocking[0] is current:
        return
    if current is not None:
        sched.events.append((plan.step, plan.time, current.request.request_id,
                            EventKind.HOL_RELEASE, ""))
        sched._hol_head = None
    if blocking is not None:
        head, why, budget, behind = blocking
        sched._hol_head = head
        sched.events.append((plan.step, plan.time, head.request.request_id, EventKind.HOL_BLOCK,
                            f"{why}, {budget} tokens and {sched.pool.free} blocks left; "
                            f"{behind.request.request_id} behind it would fit"))

def fits(sched: Scheduler, seq: Seq, budget: int) -> bool:
    """Whether `seq` could be admitted with `budget` tokens and the blocks free now."""
    if seq.unschedulable:
        return False
    cached = seq.prompt_len + seq.generated
    swap_or_chunk = seq.state is SWAPPED or sched.config.chunked_prefill
    need = blocks_for(cached, sched._block_size)
    hit = 0
    if sched.prefix is not None and seq.state is not SWAPPED:
        hit = sched.prefix.match(seq)
        if not sched._v0_prefix:
            need = sched._blocks_with_hit(seq, need, hit)[0]
    tokens = 1 if swap_or_chunk else cached - sched._kv_present(seq, hit)
    return tokens <= budget and sched.pool.can_admit(need)

def hol_floor(sched: Scheduler) -> int:
    """Free blocks that must stay free for the head-of-line state not to change: while a
    head blocks, the request behind it must keep fitting."""
    if sched._hol_head is None:
        return 0
    behind = sched.waiting.second()
    if behind is None:
        return 0
    need = blocks_for(behind.prompt_len + behind.generated, sched._block_size)
    if (sched.prefix is not None and not sched._v0_prefix
            and behind.state is not SWAPPED):
        need = sched._blocks_with_hit(behind, need)[0]  # (V0 counts every prompt block)
    return need + sched.pool.watermark_blocks
