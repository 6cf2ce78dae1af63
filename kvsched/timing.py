"""Time models: how long one step (one forward pass) takes.

The default step clock makes every step last 1 and keeps all times in steps. The other models
give each step a duration in seconds, so that traces with arrival times in seconds replay at
their real pace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class TimeModel(Protocol):
    @property
    def unit(self) -> str:
        """"steps" or "s"."""
        ...

    @property
    def whole_steps(self) -> bool:
        """Arrivals wait for the next whole step (the step clock)."""
        ...

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        """Length of a step that prefills `prefill_tokens` (recomputed included), decodes
        `num_decodes` requests reading `kv_read_tokens` tokens of KV, and moves
        `swapped_blocks` blocks between device and host."""
        ...


@dataclass(frozen=True, slots=True)
class StepClock:
    """Every step lasts 1; times are step numbers."""

    unit: str = "steps"
    whole_steps: bool = True

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        return 1.0

    def stretch_durations(self, num_decodes: int, kv_tokens_start: int,
                          num_steps: int) -> np.ndarray:
        """Durations of `num_steps` pure-decode steps (each lasts 1)."""
        return np.ones(num_steps)


@dataclass(frozen=True, slots=True)
class ConstantStep:
    """Every step lasts `step_time` seconds."""

    step_time: float
    unit: str = "s"
    whole_steps: bool = False

    def __post_init__(self) -> None:
        if not self.step_time > 0:
            raise ValueError(f"step_time must be > 0, got {self.step_time}")

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        return self.step_time

    def stretch_durations(self, num_decodes: int, kv_tokens_start: int,
                          num_steps: int) -> np.ndarray:
        """Durations of `num_steps` pure-decode steps (each lasts `step_time`)."""
        return np.full(num_steps, self.step_time)


@dataclass(frozen=True, slots=True)
class LinearStep:
    """A step costs `base` plus a price per prefill token (compute-bound), per decoding
    request, per token of KV the decodes read (memory-bound attention) and per block swapped
    over PCIe. All in seconds."""

    base: float = 0.005
    per_prefill_token: float = 0.0001
    per_decode: float = 0.0001
    per_kv_token: float = 0.0
    per_swapped_block: float = 0.0
    unit: str = "s"
    whole_steps: bool = False

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"base must be > 0, got {self.base}")
        for name in ("per_prefill_token", "per_decode", "per_kv_token", "per_swapped_block"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        return (self.base + self.per_prefill_token * prefill_tokens
                + self.per_decode * num_decodes + self.per_kv_token * kv_read_tokens
                + self.per_swapped_block * swapped_blocks)

    def stretch_durations(self, num_decodes: int, kv_tokens_start: int,
                          num_steps: int) -> np.ndarray:
        """Durations of `num_steps` pure-decode steps where each of `num_decodes` requests reads
        one more token per step; element k equals `duration(0, n, kv_start + k * n, 0)` exactly
        (the same float operations in the same order)."""
        head = (self.base + self.per_prefill_token * 0 + self.per_decode * num_decodes)
        kv = kv_tokens_start + np.arange(num_steps, dtype=np.int64) * num_decodes
        return (head + self.per_kv_token * kv) + self.per_swapped_block * 0
