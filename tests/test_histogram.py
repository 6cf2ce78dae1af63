"""GapHistogram: exact percentiles while small, within its accuracy once bucketed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.histogram import GapHistogram

gaps = st.lists(st.floats(1e-4, 100.0, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(gaps, st.lists(st.integers(1, 5), min_size=60, max_size=60),
       st.sampled_from([2, 8, 4096]), st.floats(0, 100))
def test_percentiles_against_numpy(values, counts, max_exact, p):
    """Exact while exact; once bucketed, within the relative accuracy of numpy's answer."""
    histogram = GapHistogram(max_exact=max_exact, accuracy=0.01)
    every: list[float] = []
    for value, count in zip(values, counts, strict=False):
        histogram.add(value, count)
        every += [value] * count
    want = float(np.percentile(every, p))
    got = histogram.percentile(p)
    assert histogram.count == len(every)
    assert histogram.mean == pytest.approx(np.mean(every), rel=1e-9)
    if histogram.is_exact:
        assert got == pytest.approx(want, rel=1e-12)
    else:
        assert abs(got - want) <= 0.01 * want * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=2, max_size=40), st.integers(1, 50),
       st.sampled_from([4, 4096]))
def test_add_between_counts_each_step_gap(durations, count, max_exact):
    """add_between(ends, n) equals n gaps of every consecutive difference of `ends`."""
    ends = list(np.cumsum([0.0, *durations]))
    bulk = GapHistogram(max_exact=max_exact)
    bulk.add_between(ends, count)
    one_by_one = GapHistogram(max_exact=max_exact)
    for a, b in zip(ends, ends[1:], strict=False):
        one_by_one.add(b - a, count)
    assert bulk.count == one_by_one.count == count * len(durations)
    for p in (0, 50, 90, 99, 100):
        assert bulk.percentile(p) == pytest.approx(one_by_one.percentile(p), rel=1e-12)


def test_take_back():
    """A negative count removes gaps added before (the first pass of a decode run)."""
    histogram = GapHistogram()
    histogram.add(5.0, 3)
    histogram.add(5.0, -1)
    histogram.add(1.0)
    assert histogram.count == 3
    assert histogram.percentile(0) == 1.0
    assert histogram.percentile(100) == 5.0
    histogram.add(5.0, -2)
    assert histogram.percentile(100) == 1.0


def test_empty_is_none():
    """No gaps, no figures."""
    assert GapHistogram().percentile(50) is None
    assert GapHistogram().mean is None


@settings(max_examples=150, deadline=None)
@given(st.one_of(  # a constant step's gaps (last bits apart), or a few far apart
    st.lists(st.sampled_from([0.0039, 0.0039 * (1 + 2e-16), 0.0039 * (1 - 2e-16)]),
             min_size=1, max_size=20),
    st.lists(st.sampled_from([0.0039, 0.00391, 0.02, 1e-4]), min_size=1, max_size=20)),
       st.integers(1, 60), st.integers(1, 30), st.sampled_from([0, 3, 4096]), st.booleans())
def test_add_gaps_equals_one_by_one(pattern, repeats, count, max_exact, with_high):
    """add_gaps (one bucket, few distinct values, long lists: its fast paths) keeps the
    same count, float total and percentiles as adding the gaps one at a time."""
    values = pattern * repeats  # up to 1,200 gaps: past SHORT and LONG
    bulk, single = GapHistogram(max_exact=max_exact), GapHistogram(max_exact=max_exact)
    for histogram in (bulk, single):  # bucketed from the start when max_exact is 0
        histogram.add(0.0039, 2)
    bulk.add_gaps(values, count, max(values) if with_high else None)
    bulk.add_gaps(values[::-1], count)  # the span learnt above is reused
    for value in values + values[::-1]:
        single.add(value, count)
    assert bulk.count == single.count
    assert bulk.total == single.total
    assert bulk.is_exact == single.is_exact
    for p in (0, 10, 50, 90, 99, 100):
        assert bulk.percentile(p) == single.percentile(p)
    # Every count where one by one puts it (percentiles alone may hide a count off by one).
    assert bulk._exact == single._exact and bulk._buckets == single._buckets


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0039, 0.0039 * (1 + 2e-16), 0.02, 1.5]),
                          st.integers(1, 4)), min_size=1, max_size=12),
       st.lists(st.tuples(st.integers(0, 11), st.sampled_from([0.0039, 0.007, 0.02, 3.0])),
                max_size=12),
       st.sampled_from([0, 2, 4096]))
def test_swap_equals_taking_back_then_adding(added, swaps, max_exact):
    """swap(old, new) leaves the count, the float total and every bucket as
    add(old, -1) then add(new) would."""
    one, two = GapHistogram(max_exact=max_exact), GapHistogram(max_exact=max_exact)
    for value, count in added:
        one.add(value, count)
        two.add(value, count)
    for index, new in swaps:
        old = added[index % len(added)][0]
        one.swap(old, new)
        two.add(old, -1)
        two.add(new)
    assert one.count == two.count and one.total == two.total
    assert one._exact == two._exact and one._buckets == two._buckets
