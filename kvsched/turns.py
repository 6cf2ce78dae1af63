"""Arrival order with closed-loop turns: the requests a loop takes in, earliest first.

A request with `after` (a conversation's next turn) has no arrival time of its own: it is
held until the request it names ends (finishes, is rejected, or is found starved), then
arrives `think_time` later, as a copy of itself with that arrival time. Timed requests come
in time order (simultaneous ones in input order); a released turn comes after the timed
requests due at its time (released turns among themselves by time, then input index): a
cluster learns of a release only when a replica takes in or steps, after it has routed what
was already due. Both the single-replica loop and the cluster loop read this queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from kvsched.request import Request


def check_turns(requests: Sequence[Request]) -> None:
    """Every `after` names an earlier request of the list (so turns cannot wait in a
    circle), or ValueError naming the first that does not."""
    if all(request.after is None for request in requests):
        return  # nothing to check, and no index of ids to build for a long trace
    position: dict[str, int] = {}
    for i, request in enumerate(requests):
        after = request.after
        if after is not None and position.get(after, i) >= i:
            where = "a later request" if after in {r.request_id for r in requests} \
                else "no request of the workload"
            raise ValueError(f"request {request.request_id}: after '{after}' names {where}; "
                             f"expected the id of an earlier request")
        position.setdefault(request.request_id, i)


class ArrivalQueue:
    """The requests in the order a loop takes them in; held turns join once released."""

    __slots__ = ("requests", "times", "_timed", "_next", "_released", "_waiters", "_held")

    def __init__(self, requests: Sequence[Request]) -> None:
        self.requests = requests
        timed = [i for i, r in enumerate(requests) if r.after is None]
        timed.sort(key=lambda i: requests[i].arrival_time)
        self._timed = timed
        self.times = [requests[i].arrival_time for i in timed]  # the timed arrivals only
        self._next = 0
        self._released: list[tuple[float, int, Request]] = []  # heap: (time, input index, copy)
        self._waiters: dict[str, list[int]] = {}  # predecessor id -> held input indices
        for i, request in enumerate(requests):
            if request.after is not None:
                self._waiters.setdefault(request.after, []).append(i)
        self._held = len(requests) - len(timed)

    @property
    def holding(self) -> bool:
        """Some turn is still held: an end anywhere may bring an arrival forward."""
        return self._held > 0

    def next_time(self) -> float:
        """The arrival time of the next request (inf when none is due yet)."""
        timed = self.times[self._next] if self._next < len(self.times) else math.inf
        return min(timed, self._released[0][0]) if self._released else timed

    def pop(self) -> tuple[int, Request]:
        """The next request (input index, request as it arrives); only after next_time()
        was finite."""
        released = self._released
        if released and (self._next >= len(self._timed)
                         or released[0][0] < self.times[self._next]):
            _, i, request = heapq.heappop(released)
            return i, request
        i = self._timed[self._next]
        self._next += 1
        return i, self.requests[i]

    def ended(self, request_id: str, time: float) -> None:
        """`request_id` ended at `time`: its next turns arrive `think_time` later."""
        if not self._waiters:
            return
        for i in self._waiters.pop(request_id, ()):
            request = self.requests[i]
            at = time + request.think_time
            heapq.heappush(self._released, (at, i, replace(request, arrival_time=at)))
            self._held -= 1

    def release_stuck(self, request_ids: Iterable[str], time: float) -> bool:
        """The loop has nothing left to run or take in: the requests still queued starve,
        so their next turns are released from `time`. True if any was."""
        before = self._held
        for request_id in request_ids:
            self.ended(request_id, time)
        return self._held < before

    def unreleased(self) -> list[int]:
        """Input indices of the turns never released (their previous turn never ended)."""
        return sorted(i for waiting in self._waiters.values() for i in waiting)
