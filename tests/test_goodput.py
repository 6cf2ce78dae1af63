"""Goodput as vLLM's benchmark counts it: finished within every TTFT, TPOT and e2e target."""

from __future__ import annotations

import pytest

from kvsched import EngineConfig, Request, StepClock, simulate
from kvsched.records.slo import Slo

# Prefill-first, two sequences at a time: c's and d's prefills (steps 2 and 3) hold b's
# decode back, so b's TPOT is 5/3 while a's and d's are 1; c has one token.
CONFIG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=2, block_size=4,
                      num_blocks=100, mix_prefill_decode=False)
REQUESTS = [Request("a", 0, 4, 2), Request("b", 0, 4, 4), Request("c", 1, 4, 1),
            Request("d", 1, 4, 3)]


def run(slo: Slo) -> dict:
    return simulate(REQUESTS, CONFIG, time_model=StepClock(), slo=slo).summary


def test_the_run_by_hand():
    """The latencies the goodput cases below rely on."""
    result = simulate(REQUESTS, CONFIG, time_model=StepClock())
    got = {r.request_id: (r.ttft, r.tpot, r.e2e_latency) for r in result.requests}
    assert got["a"] == (1, 1, 2)
    assert got["b"] == (1, pytest.approx(5 / 3), 6)
    assert got["c"] == (2, None, 2)  # one token: no TPOT
    assert got["d"] == (3, 1, 5)


@pytest.mark.parametrize(("slo", "met"), [
    (Slo(tpot=1.0), {"a", "c", "d"}),  # b's 5/3 misses; c (one token) counts as TPOT 0
    (Slo(tpot=2.0), {"a", "b", "c", "d"}),
    (Slo(ttft=1), {"a", "b"}),
    (Slo(e2e=2), {"a", "c"}),
    (Slo(e2e=5, tpot=1.5), {"a", "c", "d"}),
    (Slo(ttft=1, tpot=1.0), {"a"}),  # every target must hold
])
def test_goodput_with_each_slo(slo, met):
    """num_slo_met, slo_attainment and goodput count the requests within every target."""
    result = simulate(REQUESTS, CONFIG, time_model=StepClock(), slo=slo)
    records = {r.request_id: r for r in result.requests}
    assert {name for name, r in records.items() if slo.met(r)} == met
    summary = result.summary
    assert summary["num_slo_met"] == len(met)
    assert summary["slo_attainment"] == len(met) / len(REQUESTS)
    assert summary["goodput"] == pytest.approx(len(met) / summary["duration"])
    assert summary["request_goodput"] == summary["goodput"]


def test_tpot_slo_must_be_positive():
    """A TPOT target of 0 is refused at the API edge."""
    with pytest.raises(ValueError, match="tpot"):
        Slo(tpot=0)


def test_a_scenario_slo_takes_a_tpot_target():
    """`slo: {tpot: ...}` reaches the run's goodput."""
    from kvsched.runner import run_variant
    from kvsched.scenario import load_scenario_text

    text = """\
name: t
engine: {max_num_batched_tokens: 512, num_blocks: 400, block_size: 16}
slo: {tpot: 0.5}
workload: {kind: synthetic, num_requests: 5, arrival: {kind: all_at_once}, prompt_len: 10,
           output_len: 4}
"""
    variant = load_scenario_text(text, "t.yaml", ".").variants[0]
    assert run_variant(variant).summary["num_slo_met"] == 0  # step clock: TPOT 1 > 0.5
