"""Time models: how long one step (one forward pass) takes.

The default step clock makes every step last 1 and keeps all times in steps. The other models
give each step a duration in seconds, so that traces with arrival times in seconds replay at
their real pace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


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


def stretch_durations(model: TimeModel, num_decodes: int, kv_tokens_start: int,
                      num_steps: int) -> list[float]:
    """Durations of `num_steps` pure-decode steps, step k reading
    `kv_tokens_start + k * num_decodes` tokens of KV: exactly what `duration` gives step by
    step. Models may offer a faster `stretch_durations` method (same contract); steps must
    never get shorter within a stretch (the KV read only grows)."""
    return stretch_pricer(model)(num_decodes, kv_tokens_start, num_steps)


Pricer = Callable[[int, int, int], list[float]]
"""A decode stretch's step durations from (num_decodes, kv_tokens_start, num_steps)."""


def stretch_pricer(model: TimeModel) -> Pricer:
    """`stretch_durations(model, ...)` as one function of (num_decodes, kv_tokens_start,
    num_steps), resolved once (an engine asks it at every decode stretch)."""
    fast: Pricer | None = getattr(
        model, "stretch_durations", None)
    if fast is not None:  # (a list of Python floats, as every model here returns)
        return fast
    by_shape = getattr(model, "duration_shape", None)
    if by_shape is not None:  # priced from the batch, as the engine prices its steps
        from kvsched.timing.roofline import BatchShape

        def shaped(num_decodes: int, kv_tokens_start: int, num_steps: int) -> list[float]:
            return [by_shape(BatchShape((), num_decodes, kv_tokens_start + k * num_decodes))
                    for k in range(num_steps)]
        return shaped
    duration = model.duration

    def stepped(num_decodes: int, kv_tokens_start: int, num_steps: int) -> list[float]:
        return [duration(0, num_decodes, kv_tokens_start + k * num_decodes, 0)
                for k in range(num_steps)]
    return stepped


def constant_duration(model: TimeModel) -> float | None:
    """The length of every step, for a model whose steps all last the same (a decode
    stretch then needs no durations from it); None for the others."""
    if type(model) is ConstantStep:
        return model.step_time
    if type(model) is StepClock:
        return 1.0
    return None


@dataclass(frozen=True, slots=True)
class StepClock:
    """Every step lasts 1; times are step numbers."""

    unit: str = "steps"
    whole_steps: bool = True

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        return 1.0

    def stretch_durations(self, num_decodes: int, kv_tokens_start: int,
                          num_steps: int) -> list[float]:
        return [1.0] * num_steps


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
                          num_steps: int) -> list[float]:
        return [self.step_time] * num_steps


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
                          num_steps: int) -> list[float]:
        fixed = (self.base + self.per_prefill_token * 0 + self.per_decode * num_decodes)
        per_kv, swap = self.per_kv_token, self.per_swapped_block * 0
        # The same operations, in the same order, as `duration` (bit-identical sums).
        return [fixed + per_kv * (kv_tokens_start + k * num_decodes) + swap
                for k in range(num_steps)]
