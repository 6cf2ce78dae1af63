"""The engine's knobs: budgets, KV pool, and the rules where real schedulers differ.

Each rule is one orthogonal switch, so that vLLM V0, vLLM V1 and SGLang are combinations of
them (see the table in README.md, section "The engine").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class PreemptionMode(StrEnum):
    """What happens to a victim's KV cache."""

    RECOMPUTE = "recompute"  # drop it; re-prefill prompt + generated tokens later (vLLM default)
    SWAP = "swap"  # copy the blocks to host memory and back


class Victim(StrEnum):
    """Which running request loses its KV cache when a decode needs a block and none is free."""

    LAST_ADMITTED = "last_admitted"  # tail of the running queue (vLLM V0, V1 under FCFS)
    LOWEST_PRIORITY = "lowest_priority"  # max (priority, arrival) (vLLM V1 under priority)
    FEWEST_GENERATED = "fewest_generated"  # fewest output tokens, longest prompt (SGLang)


class Requeue(StrEnum):
    """Where a preempted request re-enters the waiting queue."""

    FRONT = "front"  # ahead of everything never started, newest victim first (vLLM)
    BACK = "back"  # re-ordered by the policy as if it had just arrived (SGLang)


class Unschedulable(StrEnum):
    """What to do with a request that can never run (prompt over the budget, or over the pool)."""

    STARVE = "starve"  # keep it queued, as the lesson does: it starves (and may block others)
    REJECT = "reject"  # turn it away at arrival with the reason, as vLLM does


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Limits and rules of one simulated engine. Defaults are the lesson's demo engine.

    - `max_num_batched_tokens`: token budget of one step (prefill + decode tokens).
    - `max_num_seqs`: most requests running at once.
    - `block_size`, `num_blocks`: the KV pool, in blocks of `block_size` tokens.
    - `watermark`: fraction of the pool that admissions must leave free
      (`floor(watermark * num_blocks)` blocks); decode growth ignores it.
    - `max_steps`: safety stop; requests left then are `unfinished`.
    - `victim`, `requeue`, `mix_prefill_decode`, `admit_after_preempt`: the rules that tell
      vLLM V0, vLLM V1 and SGLang apart (see each enum).
    - `mix_prefill_decode`: prefills and decodes share a step (the lesson, vLLM V1). When
      false a step that admits a prefill runs no decode (vLLM V0 default, SGLang).
    - `admit_after_preempt`: a step that preempted may still admit (the lesson, vLLM V0);
      vLLM V1 skips admissions in such a step.
    - `chunked_prefill`: split prompts into chunks that fit the budget left after decodes;
      `long_prefill_token_threshold` (0 = off) caps one request's chunk per step.
    - `on_unschedulable`: starve (the lesson) or reject at arrival.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 180
    watermark: float = 0.01
    preemption: PreemptionMode = PreemptionMode.RECOMPUTE
    max_steps: int = 5_000_000
    victim: Victim = Victim.LAST_ADMITTED
    requeue: Requeue = Requeue.FRONT
    mix_prefill_decode: bool = True
    admit_after_preempt: bool = True
    chunked_prefill: bool = False
    long_prefill_token_threshold: int = 0
    on_unschedulable: Unschedulable = Unschedulable.STARVE

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks",
                     "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0")
        # Accept the enums' string values from library callers too.
        object.__setattr__(self, "preemption", PreemptionMode(self.preemption))
        object.__setattr__(self, "victim", Victim(self.victim))
        object.__setattr__(self, "requeue", Requeue(self.requeue))
        object.__setattr__(self, "on_unschedulable", Unschedulable(self.on_unschedulable))

    @property
    def watermark_blocks(self) -> int:
        """Blocks an admission must leave free: floor(watermark * num_blocks), as vLLM V0."""
        # round() first so that 0.29 * 100 gives 29, not 28.999999999999996 -> 28.
        return math.floor(round(self.watermark * self.num_blocks, 9))
