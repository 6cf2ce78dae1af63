"""Time models of kvsched.timing: a decode stretch equals step-by-step durations exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvsched.timing import ConstantStep, LinearStep, StepClock, stretch_durations


@given(n=st.integers(0, 300), kv=st.integers(0, 10**6), steps=st.integers(0, 50),
       per_kv=st.floats(0, 1e-6), per_decode=st.floats(0, 1e-3))
def test_linear_stretch_is_exactly_the_step_by_step_durations(n, kv, steps, per_kv, per_decode):
    model = LinearStep(base=0.0071, per_prefill_token=3e-5, per_decode=per_decode,
                       per_kv_token=per_kv, per_swapped_block=1e-4)
    expected = [model.duration(0, n, kv + k * n, 0) for k in range(steps)]
    assert model.stretch_durations(n, kv, steps) == expected
    assert stretch_durations(model, n, kv, steps) == expected


def test_constant_and_step_clock_stretches():
    assert ConstantStep(0.025).stretch_durations(8, 100, 3) == [0.025] * 3
    assert StepClock().stretch_durations(8, 100, 2) == [1.0, 1.0]
    assert StepClock().stretch_durations(1, 0, 0) == []


class OnlyDuration:
    """A user's time model with no stretch method: each step asked on its own."""

    unit = "s"
    whole_steps = False

    def duration(self, prefill_tokens, num_decodes, kv_read_tokens, swapped_blocks):
        return 0.001 + 1e-7 * kv_read_tokens


def test_a_model_without_a_stretch_method_is_asked_step_by_step():
    assert stretch_durations(OnlyDuration(), 4, 100, 3) == [0.001 + 1e-7 * kv
                                                           for kv in (100, 104, 108)]
