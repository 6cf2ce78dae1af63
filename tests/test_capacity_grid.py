"""The guessing search on the grid: the exact answer whatever the margins say, and fewer
probes than doubling from 0 where the margins follow a queue's curve."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.analysis.capacity_grid import guess, search_grid

STEP = math.log1p(0.02)
K_MAX = int(math.log(1024) / STEP)


def scale(k: int) -> float:
    return math.exp(k * STEP)


def oracle(answer: int, shape, noise: dict[int, float | None] | None = None):
    """A probe that holds up to `answer`; its margin from `shape` (None: unknown)."""
    seen: list[int] = []

    def probe(k: int) -> tuple[bool, float | None]:
        assert k not in seen, f"probed {k} twice"
        assert -K_MAX <= k <= K_MAX
        seen.append(k)
        ok = k <= answer
        m = (noise or {}).get(k, shape(k, answer))
        return ok, m

    return probe, seen


def queue(k: int, answer: int) -> float | None:
    """A queue's margin, 1 / (1 - load), crossing 1 between answer and answer + 1; unknown
    far above (an early-stopped probe)."""
    knee = scale(answer) * 1.01
    load = scale(k) / (knee * 1.25)
    m = 0.2 / (1 - load) if load < 1 else math.inf
    return m if m < 2 else None


SHAPES = {
    "queue": queue,
    "cliff": lambda k, a: 0.5 if k <= a else 3.0,  # the margin says nothing of the distance
    "flat": lambda k, a: 1.0 if k <= a else 1.0 + 1e-9,
    "unknown": lambda k, a: None,
    "backwards": lambda k, a: max(0.01, 1 - (k - a) / 50),  # misleading: falls as load rises
    "linear": lambda k, a: max(1e-3, 1 + (k - a - 0.5) / 20),
}


@settings(max_examples=300, deadline=None)
@given(answer=st.integers(-K_MAX, K_MAX), shape=st.sampled_from(sorted(SHAPES)),
       junk=st.dictionaries(st.integers(-K_MAX, K_MAX),
                            st.one_of(st.none(), st.floats(0, 100)), max_size=4))
def test_the_search_lands_on_the_answer_whatever_the_margins(answer, shape, junk):
    probe, seen = oracle(answer, SHAPES[shape], junk)
    lo, hi = search_grid(probe, scale, STEP, K_MAX)
    if answer == K_MAX:
        assert (lo, hi) == (K_MAX, None)
    else:
        assert (lo, hi) == (answer, answer + 1)
    # A guess never costs more than about twice plain bisection over the whole grid.
    assert len(seen) <= 4 * math.ceil(math.log2(2 * K_MAX)) + 2


def test_answer_below_the_grid():
    probe, _ = oracle(-K_MAX - 1, queue)
    assert search_grid(probe, scale, STEP, K_MAX) == (None, -K_MAX)


def plain(answer: int) -> int:
    """The probes of the plain bracket (doubling k from 0, then bisecting)."""
    probed = {0}
    if answer >= 0:
        lo, jump = 0, 1
        while lo + jump <= answer:
            lo += jump
            probed.add(lo)
            jump *= 2
        hi = lo + jump
    else:
        hi, jump = 0, 1
        while hi - jump > answer:
            hi -= jump
            probed.add(hi)
            jump *= 2
        lo = hi - jump
    probed |= {lo, hi}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probed.add(mid)
        lo, hi = (mid, hi) if mid <= answer else (lo, mid)
    return len(probed)


def test_a_queue_curve_needs_fewer_probes_than_doubling_from_one():
    for answer in (12, 25, 43, 60, 90):
        probe, seen = oracle(answer, queue)
        assert search_grid(probe, scale, STEP, K_MAX) == (answer, answer + 1)
        assert len(seen) <= min(7, plain(answer) - 3), (answer, seen)


def test_guess_from_the_margins():
    assert guess([], STEP) is None
    # One holding probe at a quarter of its limit: halfway (in log) to 4x, twice the rate.
    assert math.isclose(guess([(1.0, 0.25)], STEP), math.log(2) / STEP)
    # Between a hold at 1/m = 2 and a fail at 1/m = 0.5: where the line meets 1.
    x = 1 + (2 - 1) / (2 - 0.5) * (2 - 1)
    assert math.isclose(guess([(1.0, 0.5), (2.0, 2.0)], STEP), math.log(x) / STEP)
    assert guess([(1.0, 3.0)], STEP) is None  # one failing probe says nothing
