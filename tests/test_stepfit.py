"""fit_linear: LinearStep coefficients fitted to another time model over a batch grid."""

from __future__ import annotations

import pytest

from kvsched.timing import LinearStep
from kvsched.timing.roofline import RooflineStep
from kvsched.timing.stepfit import batch_grid, fit_linear


def test_a_linear_model_is_recovered_exactly():
    truth = LinearStep(base=0.004, per_prefill_token=2e-5, per_decode=1e-4, per_kv_token=3e-8,
                       per_swapped_block=5e-4)
    fit = fit_linear(truth)
    assert fit.model.base == pytest.approx(0.004, rel=1e-6)
    assert fit.model.per_kv_token == pytest.approx(3e-8, rel=1e-6)
    assert fit.model.per_swapped_block == pytest.approx(5e-4)
    assert fit.max_error < 1e-6


def test_the_roofline_fit_has_honest_positive_prices():
    fit = fit_linear(RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm"))
    m = fit.model
    assert 0.003 < m.base < 0.01  # reading 16 GB of weights at ~3 TB/s
    assert m.per_prefill_token > 0 and m.per_kv_token > 0
    assert fit.num_batches == len(batch_grid())
    assert fit.median_error < 15


def test_an_empty_grid_is_refused():
    with pytest.raises(ValueError):
        fit_linear(LinearStep(), [])
