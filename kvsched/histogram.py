"""A histogram of inter-token gaps whose memory does not grow with the tokens it counts.

Every token after a request's first adds one gap (ITL, as vLLM's benchmark names it), so a
run adds hundreds of millions; most arrive in bulk (a decode step gives every running request
the same gap). The histogram counts per gap value: exactly, while it has seen at most
`max_exact` distinct values, then in logarithmic buckets of relative width `accuracy`
(DDSketch's scheme), which bounds memory by the range of the gaps, not their number.

Accuracy: `count` and `mean` are exact (the sum is a float sum over value x count in the
order the gaps came, so the mean may differ from a plain sum in the last bits, but never
between a run with and without decode stretches). `percentile(p)` is
numpy's default (linear interpolation between the two order statistics around rank
p/100 x (count - 1)): exact while exact, and once bucketed within a relative error of
`accuracy` (0.5% by default) of that exact value, since each order statistic is replaced by
its bucket's representative, which is within `accuracy` of it, and the interpolation is a
convex combination of the two.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate
from operator import sub

import numpy as np

from kvsched.floatsum import fold
from kvsched.quantile import lerp

try:
    import cython
except ImportError:  # (the source run as Python where Cython is not installed)
    from kvsched.compiled import PurePython as cython
if not cython.compiled:  # C's ceil and log in the compiled build (histogram.pxd): a gap's
    from math import ceil, log  # bucket costs no Python call then, as the same doubles

MAX_EXACT = 4096  # distinct values kept exactly before switching to buckets
ACCURACY = 0.005  # relative error of a bucketed percentile
SHORT = 64  # stretches of at most this many steps are counted without numpy
LONG = 1024  # ... or at most this many, when their gaps fall in one bucket or take
FEW = 8  # at most this many distinct values


class GapHistogram:
    """Counts of positive gaps (times in the run's unit); see the module docstring."""

    __slots__ = ("count", "total", "_exact", "_buckets", "_max_exact",
                 "_accuracy", "_gamma", "_inv_log_gamma", "_span_low", "_span_high",
                 "_span_key")

    def __init__(self, max_exact: int = MAX_EXACT, accuracy: float = ACCURACY) -> None:
        if not 0 < accuracy < 1:
            raise ValueError(f"accuracy must be in (0, 1), got {accuracy}")
        self.count = 0
        self.total = 0.0
        self._exact: dict[float, int] | None = {}
        self._buckets: dict[int, int] = {}
        self._max_exact = max_exact
        self._accuracy = accuracy
        self._gamma = (1 + accuracy) / (1 - accuracy)
        self._inv_log_gamma = 1.0 / math.log(self._gamma)
        # The positive values seen to fall in bucket `_span_key` lie in [low, high]; buckets
        # are monotone in the value, so any value between them falls there too: a stretch's
        # gaps (a constant step's, give or take the last bits) skip the logarithm.
        self._span_low, self._span_high, self._span_key = math.inf, -math.inf, 0

    @classmethod
    def from_counts(cls, count: int, total: float, values: dict[float, int],
                    bucketed: bool) -> GapHistogram:
        """The histogram that adding gaps one call at a time made, from its end state: the
        count, the float total as summed, each value's count, and whether it ever held more
        than `max_exact` values at once (the compiled loop's, `kvsched.fastcore`)."""
        out = cls()
        out.count, out.total = count, total
        if bucketed:
            out._exact = None
            for value, n in values.items():
                key = out._bucket(value)
                out._buckets[key] = out._buckets.get(key, 0) + n
        else:
            out._exact = dict(values)
        return out

    @property
    def is_exact(self) -> bool:
        """Whether percentiles are still exact (no bucketing yet)."""
        return self._exact is not None

    def add(self, value: float, count: int = 1) -> None:
        """`count` gaps of `value`; a negative count takes back gaps added before."""
        if not count:
            return
        self.count += count
        self.total += value * count
        self._count_value(value, count)

    def swap(self, old: float, new: float) -> None:
        """One gap of `old` added before is `new` after all: `add(old, -1)` then `add(new)`,
        in one call (once per decode run that ends)."""
        self.total += old * -1
        self.total += new
        self._count_value(old, -1)
        self._count_value(new, 1)

    def _count_value(self, value: float, count: int) -> None:
        """`count` more (or fewer) gaps of `value` in the counts (not in `count`, `total`)."""
        # (Compiled, `boxed` is the key made a Python object once for the two dict
        # operations, and the sum is C's: boxing each operand cost R1 ~40M instructions.)
        exact = self._exact
        if exact is not None:
            boxed = value
            left = exact.get(boxed, 0)
            left += count
            if left:
                exact[boxed] = left
                if len(exact) > self._max_exact:
                    self._to_buckets()
            else:
                del exact[boxed]
            return
        if self._span_low <= value <= self._span_high:
            key = self._span_key
        else:
            key = self._bucket(value)
            self._join_span(value, value, key)
        boxed = key
        left = self._buckets.get(boxed, 0)
        left += count
        if left:
            self._buckets[boxed] = left
        else:
            del self._buckets[boxed]

    def add_between(self, ends: list[float], count: int) -> None:
        """`count` gaps between each two consecutive `ends` (the end times of decode steps that
        each gave `count` requests a token), vectorised: the Python work is per distinct
        value (or bucket), never per gap."""
        if len(ends) < 2 or not count:
            return
        if len(ends) <= SHORT:  # numpy's call overhead would dominate: count in C instead
            self.add_gaps(list(map(sub, ends[1:], ends)), count)
            return
        self._add_many(np.diff(np.asarray(ends, dtype=float)), count)

    def add_gaps(self, gaps: list[float], count: int, high: float | None = None,
                 least: float | None = None) -> None:
        """`count` gaps of each value of `gaps`, in order (what `add_between` counts for
        the gaps between its ends); `high` and `least`, if given, are max(gaps) and
        min(gaps)."""
        size = len(gaps)
        if not size or not count:
            return
        low = min(gaps) if least is None else least
        top = max(gaps) if high is None else high
        if low == top:  # one value (a constant step's stretch, nearly always)
            self.count += count * size
            # Sequential, value x count at a time, as `add` would have summed them.
            total, each = self.total, low * count
            for _ in range(size):
                total += each
            self.total = total
            self._count_value(low, count * size)
            return
        exact = self._exact
        if exact is None:  # buckets are monotone in the value: one for all, usually
            one = self._span_key if self._span_low <= low and top <= self._span_high \
                else self._bucket_spanned(low, top)
            if one is not None and size < LONG:
                self.count += count * size
                self._add_total(gaps, count)
                buckets = self._buckets
                buckets[one] = buckets.get(one, 0) + size * count
                return
        # A stretch's gaps take few distinct values (sums of equal steps differ only in
        # their last bits): each value's count, in one pass, in order of first sight.
        distinct: dict[float, int] | None = None
        if size < LONG:
            distinct = {}
            for value in gaps:
                distinct[value] = distinct.get(value, 0) + 1
        if distinct is not None and (size < SHORT or len(distinct) <= FEW):
            self.count += count * size
            self._add_total(gaps, count)
            if exact is not None:
                for value, seen in distinct.items():
                    exact[value] = exact.get(value, 0) + seen * count
                if len(exact) > self._max_exact:
                    self._to_buckets()
                return
            buckets = self._buckets
            for value, seen in distinct.items():
                key = self._bucket(value)
                buckets[key] = buckets.get(key, 0) + seen * count
            return
        self._add_many(np.asarray(gaps, dtype=float), count)

    def _add_total(self, gaps: list[float], count: int) -> None:
        """Sequential, value x count at a time, as `add` would have summed them."""
        total = self.total
        for gap in gaps:
            total += gap * count
        self.total = total

    def _add_many(self, values: np.ndarray, count: int) -> None:
        self.count += count * len(values)
        # A sequential sum (add.accumulate never pairs), value x count at a time: the same
        # float as adding the gaps step by step, so stretches leave the mean unchanged.
        products = values * count
        self.total = float(np.add.accumulate(np.concatenate(([self.total], products)))[-1])
        if self._exact is not None:
            unique, counts = np.unique(values, return_counts=True)
            exact = self._exact
            for value, n in zip(unique.tolist(), counts.tolist(), strict=True):
                exact[value] = exact.get(value, 0) + n * count
            if len(exact) > self._max_exact:
                self._to_buckets()
            return
        keys, counts = np.unique(self._buckets_of(values), return_counts=True)
        buckets = self._buckets
        for key, n in zip(keys.tolist(), counts.tolist(), strict=True):
            buckets[key] = buckets.get(key, 0) + n * count

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def percentile(self, p: float) -> float | None:
        """numpy.percentile(every gap, p) (linear), exact or within `accuracy`; None if empty."""
        if self.count <= 0:
            return None
        if self._exact is not None:
            values = sorted(self._exact)
            counts = [self._exact[v] for v in values]
        else:
            keys = sorted(self._buckets)
            values = [self._representative(k) for k in keys]
            counts = [self._buckets[k] for k in keys]
        cumulative = list(accumulate(counts))
        position = (self.count - 1) * (p / 100)
        below = math.floor(position)
        fraction = position - below
        low = values[bisect_right(cumulative, below)]
        high = values[bisect_right(cumulative, min(below + 1, self.count - 1))]
        return lerp(low, high, fraction)

    @classmethod
    def merged(cls, parts: list[GapHistogram]) -> GapHistogram:
        """One histogram of every gap of `parts` (a cluster's replicas): exact while every
        part is exact and the distinct values stay few, else bucketed."""
        out = cls()
        for part in parts:
            if part._exact is not None:
                for value, n in part._exact.items():
                    out.add(value, n)
                continue
            if out._exact is not None:
                out._to_buckets()
            out.count += part.count
            out.total += part.total
            for key, n in part._buckets.items():
                out._buckets[key] = out._buckets.get(key, 0) + n
        out.total = fold(part.total for part in parts)  # each part's own sum, unchanged
        return out

    # -- buckets -------------------------------------------------------------------------

    def _bucket_spanned(self, low: float, high: float) -> int | None:
        """The bucket of every value in [low, high] (None if they span several)."""
        key = self._bucket(low)
        if high != low and self._bucket(high) != key:
            return None
        self._join_span(low, high, key)
        return key

    def _join_span(self, low: float, high: float, key: int) -> None:
        """Values in [low, high] fall in bucket `key`: remember the widest such span."""
        if low <= 0:
            return
        if key == self._span_key and self._span_low <= self._span_high:
            self._span_low = min(low, self._span_low)
            self._span_high = max(high, self._span_high)
        else:
            self._span_low, self._span_high, self._span_key = low, high, key

    def _bucket(self, value: float) -> int:
        if value <= 0:
            return -(1 << 62)  # zero gaps (never made by a time model): their own bucket
        return int(ceil(log(value) * self._inv_log_gamma))

    def _buckets_of(self, values: np.ndarray) -> np.ndarray:
        safe = np.where(values > 0, values, 1.0)
        keys = np.ceil(np.log(safe) * self._inv_log_gamma).astype(np.int64)
        return np.where(values > 0, keys, -(1 << 62))

    def _representative(self, key: int) -> float:
        if key == -(1 << 62):
            return 0.0
        return 2 * self._gamma ** key / (self._gamma + 1)

    def _to_buckets(self) -> None:
        exact = self._exact
        assert exact is not None
        self._exact = None
        buckets = self._buckets
        for value, n in exact.items():
            key = self._bucket(value)
            buckets[key] = buckets.get(key, 0) + n


class NoGaps(GapHistogram):
    """Keeps nothing: the inter-token gaps of a run that reads no `itl_*` figure (a
    capacity probe), at no cost per pass."""

    __slots__ = ()

    def add(self, value: float, count: int = 1) -> None:
        pass

    def swap(self, old: float, new: float) -> None:
        pass

    def add_gaps(self, gaps: list[float], count: int, high: float | None = None,
                 least: float | None = None) -> None:
        pass
