"""The link between the prefill and the decode pool: each request's KV crosses it once.

A transfer first waits a fixed cost (the link's latency plus a per-request cost: the
handshake, the block lists, registering memory), then its bytes flow. Flowing transfers share
the bandwidth fairly: each gets `bandwidth / n` while n flow, recomputed whenever one starts
or ends (processor sharing), so a burst of long prompts slows every transfer under way, as
one NIC shared by concurrent RDMA reads does. Times are seconds.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Flow:
    key: int
    bytes: float
    left: float  # bytes still to move
    start: float  # when the transfer was asked for (the prefill's end)


@dataclass(slots=True)
class Link:
    """Transfers over one shared link. `begin` a transfer, ask `next_time` when the next thing
    happens on it, `advance` to that time: it returns the transfers delivered then, in the
    order they were begun. `bandwidth` in bytes per second, `fixed` in seconds."""

    bandwidth: float
    fixed: float
    _waiting: list[tuple[float, int, int, float, float]] = field(default_factory=list)
    _flows: list[_Flow] = field(default_factory=list)
    _now: float = 0.0
    _order: int = 0
    moved: float = 0.0  # bytes delivered so far
    started: int = 0  # transfers begun
    delivered: int = 0

    def begin(self, key: int, now: float, num_bytes: float) -> None:
        """Start moving `num_bytes` for `key` at `now` (not before the link's own clock)."""
        self._order += 1
        self.started += 1
        heapq.heappush(self._waiting, (now + self.fixed, self._order, key, num_bytes, now))

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._flows)

    def next_time(self) -> float:
        """When the next transfer starts flowing or is delivered, if nothing else begins
        (a later `begin` can only delay a delivery, never advance one); inf when idle."""
        t = self._waiting[0][0] if self._waiting else math.inf
        if self._flows:
            rate = self.bandwidth / len(self._flows)
            t = min(t, self._now + min(f.left for f in self._flows) / rate)
        return t

    def advance(self, now: float) -> list[tuple[int, float, float]]:
        """Move the link's clock to `now` (= `next_time()`): the transfers delivered then,
        each as (key, when it was asked for, its bytes)."""
        done: list[tuple[int, float, float]] = []
        if self._flows:
            rate = self.bandwidth / len(self._flows)
            moved = (now - self._now) * rate
            smallest = min(f.left for f in self._flows)
            keep = []
            for flow in self._flows:
                # The flows with the least left end together (no float dust left behind).
                if flow.left <= smallest * (1 + 1e-12) and moved >= smallest * (1 - 1e-9):
                    done.append((flow.key, flow.start, flow.bytes))
                    self.moved += flow.bytes
                else:
                    flow.left -= moved
                    keep.append(flow)
            self._flows = keep
        self._now = max(self._now, now)
        while self._waiting and self._waiting[0][0] <= now:
            _, _, key, num_bytes, start = heapq.heappop(self._waiting)
            self._flows.append(_Flow(key, num_bytes, num_bytes, start))
        self.delivered += len(done)
        return done
