"""A request's state inside one run (the input `Request` stays untouched)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kvsched.blocks import blocks_for
from kvsched.prefix import Prefix
from kvsched.request import Request


class SeqState(Enum):
    ARRIVING = "arriving"  # not yet arrived
    WAITING = "waiting"  # queued, never started
    PREFILLING = "prefilling"  # admitted, prompt chunks still to run (chunked prefill)
    RUNNING = "running"  # has its first token, decodes each step
    PREEMPTED = "preempted"  # queued again, KV dropped (recompute)
    SWAPPED = "swapped"  # queued again, KV in host memory (swap)
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(slots=True, eq=False)
class Seq:
    """Mutable per-run state of one request.

    While RUNNING the generated-token count is lazy: `generated == base + scheduler.tick`
    (see `kvsched.scheduler`); otherwise `generated` holds it.
    """

    request: Request
    index: int  # position in arrival order: the last tie-breaker everywhere
    prompt_len: int
    output_len: int
    state: SeqState = SeqState.ARRIVING
    generated: int = 0
    base: int = 0
    blocks: int = 0  # device blocks held
    lifetime_blocks: int = 0  # blocks it holds when its last token is decoded
    host_blocks: int = 0  # blocks parked in host memory while SWAPPED
    prefill_left: int = 0  # PREFILLING: tokens of the current (re)prefill still to compute
    recompute_upto: int = 0  # context tokens computed before its last recompute preemption
    epoch: int = 0  # bumped whenever lazy events queued for this seq become stale
    admit_seq: int = 0  # admission counter: larger = admitted more recently
    decoded_tick: int = 0  # last tick this seq decoded in the exact path
    grew_tick: int = 0  # last tick this seq took a new block to decode
    join_step: int = 0
    enqueue_time: float = 0.0  # when it last entered the policy-ordered part of the queue
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    first_token_step: int | None = None
    finish_time: float | None = None
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_swapped_blocks: int = 0
    max_token_gap: float | None = None
    last_token_time: float | None = None  # time of the token before the current decode run
    run_tick: int = 0  # first tick of the current decode run
    run_first_end: float = 0.0  # end time of that first tick, once it ran
    run_first_gap: float = 0.0  # that tick's pass-to-pass gap (counted in the ITL for it)
    unschedulable: str | None = None  # why this request can never run, if it cannot
    end_reason: str | None = None  # why it was starved or rejected
    identity: Prefix | None = None  # its tokens as segments, with prefix caching on
    prefix_hit_tokens: int | None = None  # prompt tokens found cached at its first admission
    cached_tokens: int = 0  # tokens found cached over all its admissions (resumes included)

    @classmethod
    def of(cls, request: Request, index: int, block_size: int) -> Seq:
        # The KV cache never holds the last generated token, hence the - 1.
        lifetime = blocks_for(request.prompt_len + request.output_len - 1, block_size)
        return cls(request, index, request.prompt_len, request.output_len,
                   lifetime_blocks=lifetime)
