"""The thrashing metric and its backpressure signal (the lesson's exercise 3)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What the engine does while the backpressure signal is up."""

    NONE = "none"  # only record it
    PAUSE = "pause"  # admit nothing, not even evicted requests
    RESERVE = "reserve"  # admit only what the pool can carry to the end (no overcommit)


@dataclass(frozen=True, slots=True)
class Backpressure:
    """The thrashing signal (the lesson's exercise 3).

    `thrash_ratio` = recomputed tokens / newly generated tokens over the last `window` steps.
    The signal goes up when it exceeds `threshold` and down when it falls below `release`
    (or when the engine goes idle). `act`: `pause` admits nothing while it is up, not even an
    evicted request; `reserve` admits a request only if the pool can hold every running
    request's remaining growth plus this one's whole life, so nothing admitted then can
    cause an eviction.
    """

    window: int = 100
    threshold: float = 0.2
    release: float = 0.1
    act: Action = Action.NONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "act", Action(self.act))
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        if not 0 <= self.release <= self.threshold:
            raise ValueError("backpressure needs 0 <= release <= threshold")


class ThrashMonitor:
    """Sliding sums of recomputed and generated tokens; the backpressure signal with hysteresis."""

    __slots__ = ("config", "_recomputed", "_generated", "_sum_recomputed", "_sum_generated",
                 "signal")

    def __init__(self, config: Backpressure) -> None:
        self.config = config
        self._recomputed: deque[int] = deque()
        self._generated: deque[int] = deque()
        self._sum_recomputed = 0
        self._sum_generated = 0
        self.signal = False

    def clear(self) -> None:
        """Forget the window (the engine went idle: nothing is left to thrash)."""
        self._recomputed.clear()
        self._generated.clear()
        self._sum_recomputed = self._sum_generated = 0
        self.signal = False

    def update(self, recomputed: int, generated: int) -> float:
        """Add one step; return the window's ratio (and move `signal`)."""
        self._recomputed.append(recomputed)
        self._generated.append(generated)
        self._sum_recomputed += recomputed
        self._sum_generated += generated
        if len(self._recomputed) > self.config.window:
            self._sum_recomputed -= self._recomputed.popleft()
            self._sum_generated -= self._generated.popleft()
        ratio = self._sum_recomputed / max(1, self._sum_generated)
        if self.signal:
            self.signal = ratio >= self.config.release
        else:
            self.signal = ratio > self.config.threshold
        return ratio
