"""The thrashing metric and its backpressure signal (the lesson's exercise 3)."""

from __future__ import annotations

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

    `thrash_ratio` = recomputed tokens / newly generated tokens over the last `window` steps;
    under swap, tokens of KV moved to host and back count with the recomputed ones (the same
    waste: work that produces no new token).
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
    """Sliding sums of recomputed and generated tokens; the backpressure signal with hysteresis.

    Window sums are differences of running totals (one append per step, no deque work)."""

    __slots__ = ("config", "_recomputed", "_generated", "signal")

    def __init__(self, config: Backpressure) -> None:
        self.config = config
        self._recomputed = [0]  # running totals, one entry per step
        self._generated = [0]
        self.signal = False

    def clear(self) -> None:
        """Forget the window (the engine went idle: nothing is left to thrash)."""
        self._recomputed = [0]
        self._generated = [0]
        self.signal = False

    def update(self, recomputed: int, generated: int) -> float:
        """Add one step; return the window's ratio (and move `signal`)."""
        totals_r, totals_g = self._recomputed, self._generated
        totals_r.append(totals_r[-1] + recomputed)
        totals_g.append(totals_g[-1] + generated)
        start = max(0, len(totals_r) - 1 - self.config.window)
        window_r = totals_r[-1] - totals_r[start]
        if not window_r and not self.signal:
            return 0.0
        ratio = window_r / max(1, totals_g[-1] - totals_g[start])
        if self.signal:
            self.signal = ratio >= self.config.release
        else:
            self.signal = ratio > self.config.threshold
        return ratio
