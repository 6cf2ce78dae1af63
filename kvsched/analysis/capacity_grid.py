"""Where a capacity search probes next on the grid k (scale (1 + tolerance)^k).

A search needs one k that holds and k + 1 that fails; every other probe is the price of
finding them. Doubling k from 0 and bisecting (the plain bracket) spends most of its runs
on holding probes far below the answer, and each of those is a full run. This search
guesses instead, from each probe's SLO margin m = max(value / limit): 1/m is close to
linear in the rate (a queue's latency grows as 1 / (1 - load)), so the line through the
nearest probe that holds and the nearest that fails (or the two nearest on one side)
meets 1/m = 1 near the answer. From one holding probe, m in proportion to the rate
would reach 1 at x / m, too far when m grows faster (a queue's does): the guess goes
halfway, in log, to x / sqrt(m). A guess only chooses the next k; the verdicts decide,
and a bisection step replaces a guess that lands outside the bracket or the fourth of a
run that does not halve it. A rate that fails at x = 1 with no margin to guess from is
stepped down by DOWN, then 2 DOWN, 4 DOWN... grid steps.

The line through two holding probes is followed only SHORT of the way: 1/m falls faster
than that line as the knee nears (in the hardware scenario's curves), so the full line
overshoots into a probe that fails.

A probe whose SLO was lost before its end has no margin (an early-stopped probe has no
figures; a full one then hides them), so a search with early abort probes the same k as
one with full probes and finds the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

SHORT = 0.8
"""How far of the way to the guess from two holding probes a search steps (1/m falls faster
than the line through them as the knee nears, so the line alone overshoots)."""

DOWN = 4
"""Grid steps of the first step down from a failing x = 1 (then 2 DOWN, 4 DOWN...): the
failing probes found there rarely have a margin to guess from, and fewer of them reach
the bracket sooner (picked on the hardware scenario, BENCHMARKS.md)."""


def guess(points: list[tuple[float, float]], step: float) -> float | None:
    """The k where the SLO margin is expected to cross 1, from probes' (scale, margin)."""
    below = sorted((x, 1 / m) for x, m in points if 0 < m <= 1)  # (scale, 1 / margin)
    above = sorted((x, 1 / m) for x, m in points if m > 1)
    if below and above:  # between the nearest on either side
        (x1, y1), (x2, y2) = below[-1], above[0]
    elif len(below) >= 2:  # beyond the two highest that hold
        (x1, y1), (x2, y2) = below[-2], below[-1]
    elif len(above) >= 2:  # beneath the two lowest that fail
        (x1, y1), (x2, y2) = above[0], above[1]
    else:
        x1 = x2 = math.nan
        y1 = y2 = 0.0
    slope = (y2 - y1) / (x2 - x1) if x1 != x2 else math.nan
    if slope < 0:  # where the line meets 1/m = 1
        estimate = x1 + (1 - y1) / slope
        if not above:  # a queue's tail steepens near the knee: fall short of the line
            estimate = x2 + SHORT * (estimate - x2)
    elif below:  # the highest that holds: halfway (in log) to x / m, where m would be 1
        x, y = below[-1]  # if it grew in proportion to the rate
        estimate = x * math.sqrt(y)
    else:  # past the knee a margin grows too steeply for one probe to say where it is
        return None
    return math.log(estimate) / step if estimate > 0 else None

def search_grid(probe: Callable[[int], tuple[bool, float | None]], scale_of: Callable[[int], float],
                step: float, k_max: int) -> tuple[int | None, int | None]:
    """(lo, hi): lo holds and hi = lo + 1 fails (lo None: even -k_max fails; hi None: even
    k_max holds). `probe(k)` is (holds, margin): the margin is max(value / limit), None
    when unknown."""
    steps = search_steps(scale_of, step, k_max)
    k = next(steps)
    while True:
        try:
            k = steps.send(probe(k))
        except StopIteration as done:
            return done.value


def search_steps(scale_of: Callable[[int], float], step: float,
                 k_max: int) -> Generator[int, tuple[bool, float | None],
                                          tuple[int | None, int | None]]:
    """`search_grid` as a generator: it yields the next k to probe, is sent that probe's
    (holds, margin), and returns (lo, hi); so that several searches can share workers."""
    lo: int | None = None
    hi: int | None = None
    points: list[tuple[float, float]] = []  # (scale, margin) of the probes with one
    jump = 1  # one-sided steps without a guess: doubling
    creep = 1  # one-sided guesses: at least this far past the end, doubling
    misses = 0  # guesses in a row that did not halve the bracket
    width: int | None = None  # the bracket's width before a guessed probe
    k = 0
    while True:
        ok, margin = yield k
        if margin is not None:
            points.append((scale_of(k), margin))
        if ok:
            lo = k
        else:
            hi = k
        if lo is not None and hi is not None:
            if hi - lo <= 1:
                return lo, hi
            if width is not None:
                misses = misses + 1 if (hi - lo) * 2 > width else 0
        if lo == k_max:
            return lo, None
        if hi == -k_max:
            return None, hi
        target = guess(points, step)
        width = None
        if lo is not None and hi is not None:
            if target is not None and lo <= target < hi and misses < 3:
                # The answer is floor(target): probe it, or the next one when it is lo.
                k, width = min(max(math.floor(target), lo + 1), hi - 1), hi - lo
            else:
                k, misses = (lo + hi) // 2, 0
        elif lo is not None:  # only holds so far: up, to the guess or doubling
            if target is None:
                k, jump = min(lo + jump, k_max), jump * 2
            else:
                k, creep = min(max(math.floor(target), lo + creep), k_max), creep * 2
        else:  # only fails so far: down, to the guess or doubling
            assert hi is not None
            if target is None:
                k, jump = max(hi - DOWN * jump, -k_max), jump * 2
            else:
                k, creep = max(min(math.floor(target), hi - creep), -k_max), creep * 2
