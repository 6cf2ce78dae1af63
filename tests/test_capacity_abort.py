"""Early abort of capacity probes: the same answers as full probes, and it does stop runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvsched.cluster.loop
from kvsched.analysis.capacity import (
    SloTarget,
    capacity_frame,
    holds,
    margin,
    run_probe,
    scaled,
    search,
)
from kvsched.analysis.slo_watch import SloWatch
from kvsched.runner import run_variant
from kvsched.scenario import load_scenario_text

ROOT = Path(__file__).resolve().parents[1]

CASE = """
name: abort
seed: {seed}
engine: {{max_num_batched_tokens: {budget}, max_num_seqs: {seqs}, num_blocks: 300}}
time: {{kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}}
workload:
  kind: synthetic
  num_requests: 120
  arrival: {{{arrival}, rate: 6}}
  prompt_len: {{kind: uniform, low: 20, high: 300}}
  output_len: {{kind: uniform, low: 5, high: 60}}
variants:
  - {{name: a}}
"""

METRICS = ["ttft_p99", "ttft_p50", "ttft_p95", "ttft_mean", "e2e_p99", "e2e_p90",
           "e2e_mean", "queue_time_p99", "queue_time_p50", "tpot_p99"]


def variant_of(seed: int, budget: int, seqs: int, arrival: str):
    text = CASE.format(seed=seed, budget=budget, seqs=seqs, arrival=arrival)
    return load_scenario_text(text, "abort.yaml", ROOT).variants[0]


@pytest.fixture
def often(monkeypatch):
    """Ask the watch every 8 loop turns, so that small runs are stopped too."""
    monkeypatch.setattr(kvsched.cluster.loop, "ABORT_EVERY", 8)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), budget=st.sampled_from([256, 512, 2048]),
       seqs=st.sampled_from([4, 16, 64]),
       arrival=st.sampled_from(["kind: poisson", "kind: gamma, cv: 3"]),
       picks=st.lists(st.tuples(st.sampled_from(METRICS), st.floats(0.05, 3.0)),
                      min_size=1, max_size=2, unique_by=lambda p: p[0]))
def test_early_abort_finds_the_same_capacity_as_full_probes(often, seed, budget, seqs,
                                                            arrival, picks):
    variant = variant_of(seed, budget, seqs, arrival)
    targets = [SloTarget(metric, round(limit, 2)) for metric, limit in picks]
    full = search(variant, targets, 0.1, early_abort=False)
    fast = search(variant, targets, 0.1)
    assert capacity_frame([fast], targets).equals(capacity_frame([full], targets))
    by_scale = {p.scale: p for p in full.probes}
    for probe in fast.probes:  # the probes an early search ran, each with the full verdict
        assert probe.holds == by_scale[probe.scale].holds
        assert not (probe.aborted and probe.holds)
    # The contract, by runs of their own: the answer holds and one step above fails.
    if fast.scale is not None:
        assert holds(run_variant(scaled(variant, fast.scale)).summary, targets)[0]
    if fast.scale_above is not None:
        assert not holds(run_variant(scaled(variant, fast.scale_above)).summary, targets)[0]
        if fast.scale is not None:
            assert fast.scale_above == pytest.approx(fast.scale * 1.1, rel=1e-9)


def test_a_lost_slo_stops_the_probe_and_a_held_one_does_not(often):
    variant = variant_of(3, 512, 16, "kind: poisson")
    targets = [SloTarget("ttft_p99", 0.5)]
    lost = run_probe(variant, targets, 8.0, 6.0)
    assert lost.aborted and not lost.holds and lost.values == (None,)
    full = run_probe(variant, targets, 8.0, 6.0, early_abort=False)
    assert not full.holds and full.values[0] > 0.5
    assert full.lost and margin(full, targets) is None  # as unknown as the stopped probe's
    kept = run_probe(variant, targets, 0.25, 6.0)
    assert kept.holds and not kept.aborted and kept.values[0] <= 0.5
    assert margin(kept, targets) == kept.values[0] / 0.5


def test_the_watch_bounds_only_latency_figures():
    assert not SloWatch([("tpot_p99", 0.1), ("throughput", 5), ("ttft_p99_chat", 1)], 100)
    assert SloWatch([("ttft_p99", 1)], 100) and SloWatch([("e2e_mean", 1)], 100)
