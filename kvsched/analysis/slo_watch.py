"""Stopping a capacity probe early: once a run's SLO is provably lost, its end cannot save it.

A probe holds only if every request finishes (none starved, none unfinished), so in any run
that holds, each latency figure is taken over every request not rejected (rejection happens
on arrival only): at most N values. A request's TTFT (e2e, queue time) is known once its
first token (finish, first schedule) came, and is at least `now - arrival` while it has
not. Those bounds only grow, so:

- `<fam>_p<q> <= L` is lost once C requests are already above L, with C > M - floor(q (M - 1)
  / 100) for the largest possible M = N (numpy's linear percentile then interpolates between
  two values above L; the right side grows with M, so M = N is the safe side; one more
  request than that absorbs float rounding in numpy's index);
- `<fam>_mean <= L` is lost once the bounds' sum over N exceeds L.

The watch only ever says "lost" for runs whose full summary fails `capacity.holds`, so a
search with it finds the same answer; it sees requests only while they are live, which can
make it late, never wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from kvsched.sequence import Seq

FAMILIES = {"ttft": "first_token_time", "e2e": "finish_time",
            "queue_time": "first_scheduled_time"}
"""The latency figures the watch can bound, and the Seq time each one is measured to."""

_SLACK = 1e-9  # a bound counts above L only beyond L (1 + 1e-9): float noise never decides


class _Bound:
    """One SLO target the watch can decide: its family, percentile (None: the mean), limit."""

    __slots__ = ("attr", "limit", "need", "over", "lower")

    def __init__(self, attr: str, q: int | None, limit: float, num_requests: int) -> None:
        self.attr = attr
        self.limit = limit * (1 + _SLACK) + _SLACK * 1e-3
        n = num_requests
        self.need = math.inf if q is None else n - (q * (n - 1)) // 100 + 1
        self.over: set[int] = set()  # requests (arrival index) already above the limit
        self.lower: dict[int, float] = {}  # the mean's lower bound per request

    def lost(self, now: float, live: Sequence[Seq], num_requests: int) -> bool:
        attr, limit = self.attr, self.limit
        if self.need is math.inf:
            lower = self.lower
            for seq in live:
                t = getattr(seq, attr)
                lower[seq.index] = (now if t is None else t) - seq.request.arrival_time
            return sum(lower.values()) > limit * num_requests
        over = self.over
        for seq in live:
            t = getattr(seq, attr)
            if (now if t is None else t) - seq.request.arrival_time > limit:
                over.add(seq.index)
        return len(over) >= self.need


def _parse(metric: str) -> tuple[str, int | None] | None:
    """`ttft_p99` -> ("ttft", 99), `e2e_mean` -> ("e2e", None); None for other keys."""
    family, _, stat = metric.rpartition("_")
    if family not in FAMILIES:
        return None
    if stat == "mean":
        return family, None
    if stat.startswith("p") and stat[1:].isdigit() and 0 <= int(stat[1:]) <= 100:
        return family, int(stat[1:])
    return None


class SloWatch:
    """`simulate`'s `abort`: True once some target `metric <= limit` cannot hold any more.
    Targets it cannot bound (throughput, token gaps, per-class keys) are left to the end."""

    def __init__(self, targets: Iterable[tuple[str, float]], num_requests: int) -> None:
        self.num_requests = num_requests
        self.bounds = []
        for metric, limit in targets:
            parsed = _parse(metric)
            if parsed is not None and metric != "queue_time_mean":  # no such summary key
                family, q = parsed
                self.bounds.append(_Bound(FAMILIES[family], q, limit, num_requests))
        self.fired = False

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def __call__(self, now: float, live: Iterable[Seq]) -> bool:
        seqs = list(live)
        self.fired = any(b.lost(now, seqs, self.num_requests) for b in self.bounds)
        return self.fired
