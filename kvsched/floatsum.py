"""Float sums in a fixed order, whatever the interpreter.

Python 3.12 made `sum()` of floats compensated (Neumaier); 3.11 adds them one by one. The
records are sums of step durations and utilisations, so `sum()` would give other bytes on
3.12 and 3.13. `fold` adds left to right, as 3.11's `sum()` did (and as a step-by-step
engine does), on every interpreter.
"""

from __future__ import annotations

from collections.abc import Iterable


def fold(values: Iterable[float], start: float = 0.0) -> float:
    """`start + v0 + v1 + ...`, added left to right (3.11's `sum(values, start)`): a plain
    loop, which the compiled build runs on C doubles (kvsched/floatsum.pxd)."""
    total = start
    for value in values:
        total += value
    return total
