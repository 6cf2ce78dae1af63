"""numpy's default percentile (linear interpolation between the two order statistics around
rank p/100 x (n - 1)), without `numpy.percentile`: that one calls `np.unique`, whose first
call imports numpy.ma, about 10 ms of a run's start. The same floats, from the same
partition and the same operations in the same order (tests/test_quantile.py compares them
over random data)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def lerp(low: float, high: float, fraction: float) -> float:
    """numpy's `_lerp`: from the nearer end, so that both halves round alike."""
    if fraction >= 0.5:
        return high - (high - low) * (1 - fraction)
    return low + (high - low) * fraction


def percentiles(values: np.ndarray, quantiles: Sequence[float]) -> list[float]:
    """`np.percentile(values, quantiles).tolist()` for a non-empty float array without NaN."""
    last = len(values) - 1
    around = []  # (index below, index above, position) as numpy finds them
    for q in quantiles:
        position = last * (q / 100)
        below = math.floor(position)
        # past the last value numpy reads "index -1" on both sides (gamma measured from it)
        around.append((-1, -1, position) if position >= last else (below, below + 1, position))
    # numpy's partition, with its points: ties (0.0 and -0.0) land where they land there
    points = sorted({0, -1, *(i for below, above, _ in around for i in (below, above))})
    ordered = np.partition(values, points)
    return [lerp(float(ordered[below]), float(ordered[above]), position - below)
            for below, above, position in around]


def median(values: Sequence[float] | np.ndarray) -> float:
    """`float(np.median(values))` for a non-empty sequence of floats (np.median's NaN check
    imports numpy.ma): the middle value, or the mean of the two middle ones, from numpy's
    partition points; NaN if any value is NaN."""
    data = np.asarray(values, dtype=float)
    half = len(data) // 2
    even = len(data) % 2 == 0
    ordered = np.partition(data, [half - 1, half, -1] if even else [half, -1])
    if np.isnan(ordered[-1]):
        return math.nan
    # np.mean of the middle: a sum from 0.0 (so -0.0 comes out 0.0) over the count
    if even:
        return (0.0 + float(ordered[half - 1]) + float(ordered[half])) / 2
    return 0.0 + float(ordered[half])
