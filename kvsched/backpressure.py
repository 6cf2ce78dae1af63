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

    Window sums are differences of running totals kept in a ring of `window + 1` slots, so
    memory stays the same however long the run."""

    __slots__ = ("config", "_ring_r", "_ring_g", "_size", "_count", "_total_r", "_total_g",
                 "signal", "_skipped", "_window", "_threshold", "_release")

    def __init__(self, config: Backpressure) -> None:
        self.config = config
        self._size = config.window + 1
        self._window = config.window  # (the config's figures as typed fields: read per step)
        self._threshold = config.threshold
        self._release = config.release
        self.clear()

    def clear(self) -> None:
        """Forget the window (the engine went idle: nothing is left to thrash)."""
        self._ring_r = [0] * self._size  # running totals, slot = step count % size
        self._ring_g = [0] * self._size
        self._count = 0
        self._total_r = 0
        self._total_g = 0
        self.signal = False
        # Quiet steps skipped and not yet in ring_g, as (last step, steps, generated each,
        # total_g after the last): written only when a ratio reads ring_g (after a recompute),
        # which most runs never do; forgotten once out of the window.
        self._skipped: deque[tuple[int, int, int, int]] = deque()

    @property
    def is_quiet(self) -> bool:
        """Nothing recomputed in the window and the signal down: every step adding no
        recomputation keeps the ratio at 0 (what a decode stretch needs)."""
        if self.signal:
            return False
        start = max(0, self._count - self._window)
        return self._total_r == self._ring_r[start % self._size]

    def update(self, recomputed: int, generated: int) -> float:
        """Add one step; return the window's ratio (and move `signal`)."""
        size = self._size
        count = self._count = self._count + 1
        total_r = self._total_r = self._total_r + recomputed
        total_g = self._total_g = self._total_g + generated
        self._ring_r[count % size] = total_r
        self._ring_g[count % size] = total_g
        start = max(0, count - self._window) % size
        window_r = total_r - self._ring_r[start]
        if not window_r and not self.signal:
            return 0.0
        if self._skipped:
            self._write_skipped()
        ratio = window_r / max(1, total_g - self._ring_g[start])
        if self.signal:
            self.signal = ratio >= self._release
        else:
            self.signal = ratio > self._threshold
        return ratio

    def skip(self, num_steps: int, generated: int) -> None:
        """Add `num_steps` quiet steps of `generated` tokens each (only while `is_quiet`).
        ring_r stays: quiet, every slot of the window already holds total_r."""
        last = self._count = self._count + num_steps
        total_g = self._total_g = self._total_g + num_steps * generated
        skipped = self._skipped
        skipped.append((last, num_steps, generated, total_g))
        while skipped[0][0] <= last - self._size:  # out of the window: never read
            skipped.popleft()

    def _write_skipped(self) -> None:
        """Put the skipped steps still in the window into ring_g (every step written since
        is later, so no slot it wrote is overwritten)."""
        size = self._size
        ring_g = self._ring_g
        for last, num_steps, generated, total_g in self._skipped:
            first = max(last - num_steps + 1, self._count - size + 1)  # still in the ring
            if first > last:
                continue
            # Steps first..last go to slots first % size onwards, wrapping once at most.
            start, count = first % size, last - first + 1
            head = min(count, size - start)
            g_first = total_g - (last - first) * generated
            ring_g[start:start + head] = range(g_first, g_first + head * generated, generated) \
                if generated else [total_g] * head
            if count > head:
                rest = count - head
                g_rest = g_first + head * generated
                ring_g[:rest] = range(g_rest, g_rest + rest * generated, generated) \
                    if generated else [total_g] * rest
        self._skipped.clear()
