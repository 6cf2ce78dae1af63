"""kvsched.quantile.percentiles gives numpy.percentile's floats, bit for bit."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from run_modules import modules_loaded

from kvsched.quantile import median, percentiles

REPO = Path(__file__).resolve().parent.parent

FLOATS = st.one_of(st.floats(-1e12, 1e12, allow_nan=False),
                   st.integers(0, 10 ** 6).map(float),  # many ties, as step counts have
                   st.sampled_from([0.0, 1e-300, 2.5e-5, 1e300, -0.0]))
QUANTILES = st.lists(st.one_of(st.sampled_from([50, 90, 95, 99]),
                               st.floats(0, 100, allow_nan=False)), min_size=1, max_size=5)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                 == math.copysign(1, b))


@given(st.lists(FLOATS, min_size=1, max_size=300), QUANTILES)
@settings(max_examples=800, deadline=None)
def test_percentiles_are_numpys(values, quantiles):
    data = np.array(values, dtype=float)
    expected = np.percentile(data, quantiles).tolist()
    got = percentiles(data, quantiles)
    assert all(same(g, e) for g, e in zip(got, expected, strict=True)), (got, expected)
    assert data.tolist() == values  # the caller's array is left as it was


@given(st.lists(st.sampled_from([1.0, 2.0, math.inf, -math.inf]), min_size=1, max_size=8),
       QUANTILES)
def test_infinities_come_out_as_numpy_has_them(values, quantiles):
    data = np.array(values)
    with np.errstate(invalid="ignore"):
        expected = np.percentile(data, quantiles).tolist()
    assert all(same(g, e) for g, e in zip(percentiles(data, quantiles), expected, strict=True))


def test_a_summary_does_not_import_numpy_ma():
    code = ("import sys\nfrom kvsched.simulator import simulate\n"
            "from kvsched.config import EngineConfig\nfrom kvsched.request import Request\n"
            "reqs = [Request(f'r{i}', float(i), 8 + i, 4) for i in range(30)]\n"
            "summary = simulate(reqs, EngineConfig(num_blocks=200)).summary\n"
            "assert summary['ttft_p99'] is not None\n"
            "assert 'numpy.ma' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@given(st.lists(FLOATS, min_size=1, max_size=300))
@settings(max_examples=500, deadline=None)
def test_median_is_numpys(values):
    assert same(median(values), float(np.median(np.array(values))))


def test_median_of_values_with_a_nan_is_nan():
    assert math.isnan(median([1.0, math.nan, 3.0])) and math.isnan(np.median([1.0, math.nan]))


def test_a_whole_run_with_its_diagnosis_does_not_import_numpy_ma(tmp_path):
    assert modules_loaded(["run", "scenarios/pool60.yaml", "--out", str(tmp_path)],
                          ("numpy.ma", "numpy")) == ["numpy"]
