"""vLLM's latency figures: TPOT per request, ITL over every inter-token gap, the new
percentiles and throughputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_engine import reference_simulate
from test_engine_reference import clocks, configs, policies, workloads

from kvsched import EngineConfig, LinearStep, Request, StepClock, simulate
from kvsched.records.metrics import SUMMARY_KEYS

ROOMY = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_blocks=100)


def test_tpot_by_hand():
    """TPOT = (e2e - ttft) / (output_len - 1); a one-token request has none."""
    clock = LinearStep(base=0.01, per_prefill_token=0.001, per_decode=0.002)
    requests = [Request("a", 0.0, 10, 3), Request("b", 0.0, 6, 1)]
    result = simulate(requests, ROOMY, time_model=clock)
    a, b = result.requests
    # step 0 prefills 16 tokens (0.026 s): both first tokens; b is done. Steps 1, 2 decode a
    # alone (0.012 s each): a's e2e 0.05, ttft 0.026, TPOT 0.024 / 2.
    assert a.ttft == pytest.approx(0.026)
    assert a.e2e_latency == pytest.approx(0.05)
    assert a.tpot == pytest.approx(0.012)
    assert b.tpot is None
    summary = result.summary
    assert summary["tpot_mean"] == pytest.approx(0.012)
    assert summary["tpot_p99"] == pytest.approx(0.012)
    assert summary["itl_mean"] == pytest.approx(0.012)  # a's two gaps
    assert summary["itl_p50"] == pytest.approx(0.012)
    assert summary["output_throughput"] == pytest.approx(4 / 0.05)
    assert summary["total_token_throughput"] == pytest.approx((4 + 16) / 0.05)
    assert summary["request_throughput"] == pytest.approx(2 / 0.05)


def test_tpot_reported_per_request_matches_mean():
    """tpot_mean is the mean of requests.csv's tpot over the requests that have one."""
    requests = [Request(f"r{i}", i * 0.5, 20 + 7 * i, 1 + (i * 5) % 17) for i in range(30)]
    config = EngineConfig(max_num_batched_tokens=48, max_num_seqs=6, block_size=4,
                          num_blocks=120, chunked_prefill=True)
    result = simulate(requests, config, time_model=LinearStep(per_kv_token=0.00001))
    tpots = [r.tpot for r in result.requests if r.tpot is not None]
    assert len(tpots) > 10
    assert result.summary["tpot_mean"] == pytest.approx(np.mean(tpots))
    assert result.summary["tpot_p90"] == pytest.approx(np.percentile(tpots, 90))
    e2e = [r.e2e_latency for r in result.requests if r.e2e_latency is not None]
    assert result.summary["e2e_p95"] == pytest.approx(np.percentile(e2e, 95))


def test_new_keys_follow_the_old():
    """The summary keeps every old key in order and adds vLLM's after them."""
    summary = simulate([Request("a", 0, 4, 3)], ROOMY).summary
    assert list(summary)[:len(SUMMARY_KEYS)] == list(SUMMARY_KEYS)
    assert SUMMARY_KEYS.index("ttft_p90") > SUMMARY_KEYS.index("goodput")
    assert summary["itl_p99"] == 1.0  # step clock: one step between tokens
    assert summary["tpot_mean"] == 1.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), configs(), policies, clocks, st.booleans())
def test_itl_equals_every_gap_of_the_reference(requests, config, policy, clock, stretches):
    """The ITL histogram holds exactly the naive engine's per-token gaps, stretches or not."""
    result = simulate(requests, config, policy, clock, stretches=stretches)
    expected, _ = reference_simulate(requests, config, policy, clock)
    gaps = [g for r in expected.values() for g in r["gaps"]]
    summary = result.summary
    if not gaps:
        assert summary["itl_mean"] is None and summary["itl_p50"] is None
        return
    assert summary["itl_mean"] == pytest.approx(np.mean(gaps), rel=1e-9)
    for q in (50, 90, 95, 99):
        assert summary[f"itl_p{q}"] == pytest.approx(np.percentile(gaps, q), rel=1e-9), q
    if summary["token_gap_max"] is not None:
        assert max(gaps) == summary["token_gap_max"]


def test_itl_counts_every_token_after_the_first():
    """A run's ITL holds one gap per token after each request's first (a long stretch)."""
    requests = [Request(f"r{i}", 0, 8, 200 + i) for i in range(5)]
    result = simulate(requests, ROOMY, time_model=StepClock())
    assert result.summary["itl_mean"] == 1.0
    clock = LinearStep(per_kv_token=0.0001)
    sped = simulate(requests, ROOMY, time_model=clock)
    slow = simulate(requests, ROOMY, time_model=clock, stretches=False)
    for key in ("itl_mean", "itl_p50", "itl_p90", "itl_p99"):
        assert sped.summary[key] == pytest.approx(slow.summary[key], rel=1e-12), key
