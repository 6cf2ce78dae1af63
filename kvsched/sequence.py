"""A request's state inside one run (the input `Request` stays untouched)."""

from __future__ import annotations

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


ARRIVING = SeqState.ARRIVING  # (a member read through its class: a lookup in Python 3.11)


class Seq:
    """Mutable per-run state of one request.

    While RUNNING the generated-token count is lazy: `generated == base + scheduler.tick`
    (see `kvsched.scheduler`); otherwise `generated` holds it.
    """

    __slots__ = ("request", "index", "prompt_len", "output_len", "state", "generated", "base",
                 "blocks", "lifetime_blocks", "host_blocks", "prefill_left", "recompute_upto",
                 "epoch", "admit_seq", "decoded_tick", "grew_tick", "join_step", "enqueue_time",
                 "first_scheduled_time", "first_token_time", "first_token_step", "finish_time",
                 "num_preemptions", "num_recomputed_tokens", "num_swapped_blocks",
                 "max_token_gap", "last_token_time", "run_tick", "run_first_end",
                 "run_first_gap", "unschedulable", "end_reason", "identity",
                 "prefix_hit_tokens", "cached_tokens", "v0_cached", "remote_tokens")

    # (A plain class with its fields typed in sequence.pxd: the compiled build makes it a C
    # struct, which a dataclass cannot be.)
    def __init__(self, request: Request, index: int, prompt_len: int, output_len: int,
                 lifetime_blocks: int = 0) -> None:
        self.request = request
        self.index = index  # position in arrival order: the last tie-breaker everywhere
        self.prompt_len = prompt_len
        self.output_len = output_len
        self.state: SeqState = ARRIVING
        self.generated = 0
        self.base = 0
        self.blocks = 0  # device blocks held
        self.lifetime_blocks = lifetime_blocks  # blocks it holds when its last token is decoded
        self.host_blocks = 0  # blocks parked in host memory while SWAPPED
        self.prefill_left = 0  # PREFILLING: tokens of the current (re)prefill still to compute
        self.recompute_upto = 0  # context tokens computed before its last recompute preemption
        self.epoch = 0  # bumped whenever lazy events queued for this seq become stale
        self.admit_seq = 0  # admission counter: larger = admitted more recently
        self.decoded_tick = 0  # last tick this seq decoded in the exact path
        self.grew_tick = 0  # last tick this seq took a new block to decode
        self.join_step = 0
        self.enqueue_time = 0.0  # when it last entered the policy-ordered part of the queue
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.first_token_step: int | None = None
        self.finish_time: float | None = None
        self.num_preemptions = 0
        self.num_recomputed_tokens = 0
        self.num_swapped_blocks = 0
        self.max_token_gap: float | None = None
        self.last_token_time: float | None = None  # of the token before the current decode run
        self.run_tick = 0  # first tick of the current decode run
        self.run_first_end = 0.0  # end time of that first tick, once it ran
        self.run_first_gap = 0.0  # that tick's pass-to-pass gap (counted in the ITL for it)
        self.unschedulable: str | None = None  # why this request can never run, if it cannot
        self.end_reason: str | None = None  # why it was starved or rejected
        self.identity: Prefix | None = None  # its tokens as segments, with prefix caching on
        self.prefix_hit_tokens: int | None = None  # prompt tokens cached at first admission
        self.cached_tokens = 0  # tokens found cached over all its admissions (resumes too)
        # vLLM V0 counts a prompt's cached tokens once, when the scheduler first looks at it,
        # and keeps that count while it is in prefill (ComputedBlocksTracker); -1: not yet
        self.v0_cached = -1
        # KV of its prompt that another instance computed and sent (a P/D decode instance's
        # request): present at its first admission, so not computed; spent once admitted.
        self.remote_tokens = 0

    def __repr__(self) -> str:
        return (f"Seq({self.request.request_id!r}, index={self.index}, "
                f"state={self.state.name}, generated={self.generated})")

    @classmethod
    def of(cls, request: Request, index: int, block_size: int) -> Seq:
        # The KV cache never holds the last generated token, hence the - 1.
        lifetime = blocks_for(request.prompt_len + request.output_len - 1, block_size)
        return cls(request, index, request.prompt_len, request.output_len, lifetime)
