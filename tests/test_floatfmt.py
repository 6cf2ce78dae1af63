"""The vectorised `%.10g` writes the bytes Python's `%` writes, for every float (FORMAT is
that string: the reference is Python's own `%` operator)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.records.floatfmt import FORMAT, format_list

EDGES = [
    0.0, -0.0, 1.0, -1.0, 10.0, 1e9, 1e10, 1e-4, 1e-5, 9.9999e-5, 0.5, 2.5, 0.0039,
    1234567890.5, 1234567891.5, -1234567890.5,  # ties at the tenth digit: to even
    9999999999.5, 9999999999.4, 0.99999999995, 0.999999999949, 0.000099999999995,
    0.1 + 0.2, 3600.0 - 1e-9, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
    float("inf"), float("-inf"), float("nan"),
]


def expected(values):
    return [FORMAT % v for v in values]


def test_edge_cases_and_their_neighbours():
    with np.errstate(over="ignore"):
        near = [float(np.nextafter(v, d)) for v in EDGES for d in (-np.inf, np.inf)
                if np.isfinite(v)]
    values = EDGES + near
    assert format_list(values) == expected(values)


def test_constant_looking_columns():
    """Equal as floats is not equal as text: -0.0 and 0.0."""
    for values in ([-0.0, 0.0], [0.0, -0.0, 0.0], [0.5] * 3 + [-0.5]):
        assert format_list(values) == expected(values)


def test_powers_of_ten_and_ties_at_every_exponent():
    """Values at, just under and just over each power of ten, and exact decimal ties."""
    values = []
    for x in range(-6, 12):
        p = 10.0 ** x
        values += [p, float(np.nextafter(p, 0)), float(np.nextafter(p, np.inf)),
                   p * 1.23456789015, p * 9.9999999995, p * 1.0000000005]
    values += [k + 0.5 for k in range(1_000_000_000, 1_000_000_050)]
    assert format_list(values) == expected(values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(), max_size=50))
def test_any_floats(values):
    assert format_list(values) == expected(values)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(1e-5, 1e11) | st.floats(-1e11, -1e-5), min_size=1, max_size=50))
def test_the_fixed_notation_range(values):
    """Where the fast path works (random bit patterns seldom land there)."""
    assert format_list(values) == expected(values)


def test_a_long_column_of_sums():
    """Step start times: sums of a step time, the bulk of steps.csv."""
    times = np.cumsum(np.full(200_000, 0.0039)).tolist()
    assert format_list(times) == expected(times)
    assert format_list([0.0039] * 1000) == ["0.0039"] * 1000


def test_near_ties_round_as_the_exact_binary_value_does():
    """Decimals half-way at the eleventh digit: the nearest float lies just above or below
    the tie, and only its exact expansion says which way `%` rounds."""
    rng = np.random.default_rng(0)
    heads = rng.integers(10**9, 10**10, 5000).tolist()
    exponents = rng.integers(-14, 0, 5000).tolist()
    values = [float(f"{head}5e{x}") for head, x in zip(heads, exponents, strict=True)]
    assert format_list(values) == expected(values)
