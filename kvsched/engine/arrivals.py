"""The arrival guard: what happens to a request as it reaches the engine (queued, capped at
`max_model_len`, or turned away with the real engine's words) and why one can never run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsched.blocks import blocks_for
from kvsched.config import RejectionTexts, StepOrder, Unschedulable
from kvsched.engine.texts import model_len_rejection, v0_rejection
from kvsched.kinds import EventKind, Reason, Why
from kvsched.reservation import CLIP_MAX_NEW_TOKENS
from kvsched.sequence import SeqState

if TYPE_CHECKING:
    from kvsched.engine.mechanism import Scheduler
    from kvsched.sequence import Seq

# (Module constants: an enum member read through its class costs a call of the enum type's
# __getattribute__ hook in Python 3.11, ~1k instructions; read once per arrival here.)
WAITING = SeqState.WAITING
PREEMPTED = SeqState.PREEMPTED
ARRIVE = EventKind.ARRIVE
STARVE = EventKind.STARVE
V0_TEXTS = RejectionTexts.VLLM_V0
RUNNING_LOOP = StepOrder.RUNNING_LOOP
REJECT = Unschedulable.REJECT
BEHIND_HEAD = Why.BEHIND_HEAD
NEVER_ADMITTED = Why.NEVER_ADMITTED


def arrive(sched: Scheduler, seq: Seq, step: int) -> None:
    """A request arrives: queue it, or reject it if it can never run and the engine says so."""
    request = seq.request
    seq.join_step = step
    max_queued = sched.config.max_queued_requests
    if max_queued is not None and len(sched.waiting) >= max_queued:
        sched.reject(seq, step, Reason("The request queue is full.", Why.QUEUE_FULL))  # SGLang's
        return
    max_model_len = sched.config.max_model_len
    if max_model_len is not None:
        too_long = model_len_rejection(seq.prompt_len, max_model_len)
        v0 = sched.config.rejection_texts is V0_TEXTS
        if v0 and seq.prompt_len == max_model_len:
            too_long = None  # vLLM 0.8.5 runs a prompt of exactly max_model_len
        if too_long:
            sched.reject(seq, step, Reason(too_long, Why.PROMPT_OVER_MODEL_LEN))
            return
        # V1 stops once the sequence holds max_model_len tokens; V0's stop checker
        # once it holds more (RULES.md V0-3): one token later.
        cap = max_model_len - seq.prompt_len + (1 if v0 else 0)
        if seq.output_len > cap:
            seq.output_len = max(cap, 1)
            seq.lifetime_blocks = blocks_for(seq.prompt_len + seq.output_len - 1,
                                             sched._block_size)
    seq.unschedulable = unschedulable_reason(sched, seq)
    if seq.unschedulable and sched.config.on_unschedulable is REJECT:
        sched.reject(seq, step, seq.unschedulable)
        return
    seq.state = WAITING
    if sched.in_flight and sched._async:
        sched.late.append(seq)  # the next step was decided before it came (RULES.md A2)
    else:
        sched.waiting.push(seq, request.arrival_time)
    sched.events.append((step, request.arrival_time, request.request_id, ARRIVE,
                        f"unschedulable: {seq.unschedulable}" if seq.unschedulable else ""))

def unschedulable_reason(sched: Scheduler, seq: Seq) -> Reason | None:
    """Why `seq` can never run under this engine, or None."""
    cfg = sched.config
    if cfg.rejection_texts is V0_TEXTS:
        v0 = v0_rejection(seq.prompt_len, cfg)
        if v0 is not None:
            return v0
    if (not cfg.chunked_prefill
            and seq.prompt_len - seq.remote_tokens > cfg.max_num_batched_tokens):
        return Reason(f"prompt_len {seq.prompt_len} > max_num_batched_tokens "
                      f"{cfg.max_num_batched_tokens}", Why.PROMPT_OVER_BUDGET)
    if cfg.step_order is RUNNING_LOOP:
        # vLLM V1 looks at the pool only at the full-prompt gate, and without the
        # watermark when nothing runs: only a prompt over the whole pool never runs.
        need = blocks_for(seq.prompt_len, sched._block_size)
        if cfg.scheduler_reserve_full_isl and need > cfg.usable_blocks:
            return Reason(f"needs {need} KV blocks for its prompt, the pool has "
                          f"{cfg.usable_blocks} ({cfg.num_blocks} blocks - 1 null block)"
                          if cfg.null_block else
                          f"needs {need} KV blocks for its prompt, the pool has "
                          f"{cfg.num_blocks}", Why.NEVER_FITS)
        return None
    if sched.reservation is not None:  # SGLang admits only below the whole pool
        need = seq.prompt_len + min(seq.output_len, CLIP_MAX_NEW_TOKENS) + sched._block_size
        if need >= cfg.usable_blocks * sched._block_size:
            return Reason(f"needs {need} KV tokens free to be admitted (prompt + clipped "
                          f"max_new_tokens + a page), the pool has "
                          f"{cfg.usable_blocks * sched._block_size}", Why.NEVER_FITS)
    usable = sched.pool.num_blocks - sched.pool.watermark_blocks  # (the config computes them)
    if seq.lifetime_blocks > usable:
        null = " - 1 null block" if cfg.null_block else ""
        return Reason(f"needs {seq.lifetime_blocks} KV blocks to finish, the pool admits at "
                      f"most {usable} ({cfg.num_blocks} blocks{null} - "
                      f"{cfg.watermark_blocks} watermark)", Why.NEVER_FITS)
    return None


def explain_starvation(sched: Scheduler, step: int, now: float) -> None:
    """Name, for every request still waiting at the end, why it never ran."""
    queued = list(sched.waiting)
    head = queued[0] if queued else None
    budget = sched.config.max_num_batched_tokens
    # Every request behind the head starves for the same reason: one Reason for them all (a
    # str subclass with a dict: each made costs ~5k instructions, and a queue may hold
    # thousands). None of its holders changes it.
    behind = (None if head is None else
              Reason(f"queued behind {head.request.request_id}, which can never run",
                     BEHIND_HEAD))
    for seq in queued:
        if seq.unschedulable:
            reason = seq.unschedulable
        elif seq.state is PREEMPTED and not sched.config.chunked_prefill \
                and seq.prompt_len + seq.generated > budget:
            reason = Reason(f"recompute of {seq.prompt_len + seq.generated} tokens after "
                            f"preemption > max_num_batched_tokens {budget}",
                            Why.RECOMPUTE_OVER_BUDGET)
        elif behind is not None and seq is not head:
            reason = behind
        else:
            reason = Reason("never admitted", NEVER_ADMITTED)
        seq.end_reason = reason
        sched.events.append((step, now, seq.request.request_id, STARVE, reason))
