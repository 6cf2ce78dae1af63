"""SLO-aware admission and goodput (issue 4, cure 2): who is turned away at arrival, with which
estimate, and what it does to goodput and the tail under overload.

Estimates were worked out by hand from the README: `tokens` = wait to the step the request
joins + ceil((queued prefill tokens + prompt) / (budget - running decodes)) steps, each priced
by the time model; `throughput` = wait + (requests waiting + 1) x span / admitted over the
last `window` steps, `tokens` until the window fills or admits; a full empty window counts
as one admission.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvsched import EngineConfig, LinearStep, Request, RunResult, simulate
from kvsched.admission import SloAdmission
from kvsched.cli import app
from kvsched.errors import ScenarioError
from kvsched.records.slo import Slo
from kvsched.runner import run_scenario
from kvsched.scenario import load_scenario


def rec(result: RunResult, request_id: str):
    (record,) = [r for r in result.requests if r.request_id == request_id]
    return record


def statuses(result: RunResult) -> dict[str, str]:
    return {r.request_id: r.status for r in result.requests}


def rejected(result: RunResult) -> list[str]:
    return [r.request_id for r in result.requests if r.status == "rejected"]


def events_of(result: RunResult, request_id: str) -> list[str]:
    return [e[3] for e in result.events if e[2] == request_id]


def burst(n: int, prompt_len: int, output_len: int, arrival: float = 0) -> list[Request]:
    return [Request(f"r{i}", arrival, prompt_len, output_len) for i in range(n)]


# -- who is rejected, with which estimate --------------------------------------------------


def test_an_idle_engine_rejects_nothing():
    """Arrivals 10 steps apart find the engine empty: estimate 1 step, never above 1."""
    requests = [Request(f"r{i}", 10 * i, 50, 3) for i in range(5)]
    result = simulate(requests, admission=SloAdmission(1))
    assert result.summary["num_rejected"] == 0
    assert [r.ttft for r in result.requests] == [1.0] * 5
    assert not [e for e in result.events if e[3] == "reject"]


def test_a_long_queue_gets_later_arrivals_rejected_with_the_estimate():
    """Budget 100, ten 100-token prompts at t=0, target 3: r3 on are estimated 4 steps."""
    # r_k finds k queued prompts ahead (the rejected are not queued): r0..r2 are estimated
    # 1, 2, 3 steps, every later one 300 + 100 tokens at 100 a step = 4.
    result = simulate(burst(10, 100, 1), EngineConfig(max_num_batched_tokens=100),
                      admission=SloAdmission(3))
    assert rejected(result) == [f"r{k}" for k in range(3, 10)]
    # The estimate is exact here: one prompt per step, TTFT 1, 2, 3.
    assert [rec(result, f"r{k}").ttft for k in range(3)] == [1.0, 2.0, 3.0]
    for k in range(3, 10):
        record = rec(result, f"r{k}")
        assert record.reason == "estimated TTFT 4 > ttft_slo 3 (tokens estimator)"
        assert (record.generated_tokens, record.ttft, record.first_scheduled_time,
                record.finish_time) == (0, None, None, None)
        assert events_of(result, f"r{k}") == ["reject"]  # never queued, never admitted
    (event,) = [e for e in result.events if e[2] == "r9"]
    assert event == (0, 0, "r9", "reject", "estimated TTFT 4 > ttft_slo 3 (tokens estimator)")
    assert result.summary["num_rejected"] == 7


@pytest.mark.parametrize(("ttft_slo", "admitted"), [(1, ["q0", "q1", "q2"]),
                                                    (2, ["q0", "q1", "q2", "q3", "q4"])])
def test_tokens_estimate_serves_queued_work_at_the_budget_left_by_decodes(ttft_slo, admitted):
    """One running decode leaves 99 tokens a step: the 4th 25-token prompt needs a 2nd step."""
    # r0 decodes from step 1. q0..q4 (25 tokens) join at step 1: q0..q2 fit in 75 <= 99
    # (estimate 1), q3 brings 100 > 99 (estimate 2); with q3 turned away q4 brings 100 again.
    # The engine agrees: step 1 runs r0's decode + q0..q2 (76 tokens), q3 and q4 go in step 2.
    requests = [Request("r0", 0, 10, 50)] + [Request(f"q{i}", 1, 25, 1) for i in range(5)]
    result = simulate(requests, EngineConfig(max_num_batched_tokens=100),
                      admission=SloAdmission(ttft_slo))
    queued = [r.request_id for r in result.requests if r.status == "finished"][1:]
    assert queued == admitted
    assert {q: rec(result, q).ttft for q in admitted} == {
        q: 1.0 if q in ("q0", "q1", "q2") else 2.0 for q in admitted}
    if ttft_slo == 1:
        assert rec(result, "q3").reason == "estimated TTFT 2 > ttft_slo 1 (tokens estimator)"
        assert rec(result, "q4").reason == "estimated TTFT 2 > ttft_slo 1 (tokens estimator)"


@pytest.mark.parametrize(("ttft_slo", "status"), [(1.4, "rejected"), (1.5, "finished")])
def test_tokens_estimate_counts_the_wait_for_the_next_step(ttft_slo, status):
    """Arriving at 0.5 while r0 runs, x joins at step 1: estimate 0.5 + 1 = 1.5, as it gets."""
    requests = [Request("r0", 0, 10, 5), Request("x", 0.5, 10, 1)]
    result = simulate(requests, admission=SloAdmission(ttft_slo))
    x = rec(result, "x")
    assert x.status == status
    if status == "rejected":
        assert x.reason == f"estimated TTFT 1.5 > ttft_slo {ttft_slo} (tokens estimator)"
    else:
        assert x.ttft == 1.5


def test_tokens_estimate_prices_each_step_with_the_time_model():
    """Linear model 0.01 + 0.001/token, budget 2048, three 1000-token prompts at t=0."""
    # r0: 1 step of 1000 tokens = 1.01; r1: 2000 tokens, 1 step = 2.01; r2: 3000 tokens,
    # 2 steps priced at 2048 tokens each = 2 x 2.058 = 4.116 > 4.
    model = LinearStep(base=0.01, per_prefill_token=0.001, per_decode=0)
    result = simulate(burst(3, 1000, 1), time_model=model, admission=SloAdmission(4))
    assert statuses(result) == {"r0": "finished", "r1": "finished", "r2": "rejected"}
    assert rec(result, "r2").reason == "estimated TTFT 4.116 > ttft_slo 4 (tokens estimator)"
    assert rec(result, "r1").ttft == pytest.approx(2.01)  # r0 and r1 share step 0
    accepted = simulate(burst(3, 1000, 1), time_model=model, admission=SloAdmission(4.2))
    assert accepted.summary["num_rejected"] == 0
    assert rec(accepted, "r2").ttft == pytest.approx(3.02)  # pessimistic: 4.116 estimated


def test_throughput_estimator_uses_tokens_before_anything_was_admitted():
    """At t=0 nothing was admitted yet: r10 is estimated as tokens would, 110 / 100 -> 2."""
    result = simulate(burst(11, 10, 1), EngineConfig(max_num_batched_tokens=100),
                      admission=SloAdmission(1, "throughput"))
    assert rejected(result) == ["r10"]
    assert rec(result, "r10").reason == \
        "estimated TTFT 2 > ttft_slo 1 (throughput estimator)"


def max_seqs_two() -> list[Request]:
    """max_num_seqs 2, budget 100: r0..r9 (3 tokens each) at t=0 run two at a time."""
    # Pairs are admitted at steps 0, 3, 6, 9, 12. x joins at step 1, y at step 4.
    return burst(10, 10, 3) + [Request("x", 1, 10, 1), Request("y", 4, 10, 1)]


@pytest.mark.parametrize(("window", "y_status"), [(200, "rejected"), (1, "finished")])
def test_throughput_estimator_uses_the_recent_admission_rate(window, y_status):
    """After step 0 admitted 2 in 1 step, x (8 waiting ahead) is estimated 9 / 2 = 4.5."""
    # y at step 4: 6 waiting (r4..r9). Steps 0..3 admitted 2, 0, 0, 2: rate 1 per step ->
    # estimate 7; with window 1 only step 3 counts (2 per step) -> 3.5.
    config = EngineConfig(max_num_batched_tokens=100, max_num_seqs=2)
    result = simulate(max_seqs_two(), config, admission=SloAdmission(4, "throughput", window))
    assert rec(result, "x").reason == "estimated TTFT 4.5 > ttft_slo 4 (throughput estimator)"
    y = rec(result, "y")
    assert y.status == y_status
    if y_status == "rejected":
        assert y.reason == "estimated TTFT 7 > ttft_slo 4 (throughput estimator)"
    else:
        assert y.ttft == 12.0  # admitted at step 15 behind r4..r9: the rate lags


def test_throughput_estimator_treats_a_window_without_admission_as_a_stalled_queue():
    """Window 1: step 1 admitted nothing, so z at step 2 (8 ahead) is estimated 9 x 1 step."""
    # x (t=1) sees step 0's 2 admissions: (8 + 1) / 2 = 4.5 > 4, rejected. z (t=2) sees only
    # step 1, which admitted nothing: at best one admission per window (1 step), so
    # (8 + 1) x 1 = 9 > 4: rejected too. (It would have waited 14 steps behind the pairs.)
    requests = burst(10, 10, 3) + [Request("x", 1, 10, 1), Request("z", 2, 10, 1)]
    config = EngineConfig(max_num_batched_tokens=100, max_num_seqs=2)
    result = simulate(requests, config, admission=SloAdmission(4, "throughput", window=1))
    assert rec(result, "x").reason == "estimated TTFT 4.5 > ttft_slo 4 (throughput estimator)"
    assert rec(result, "z").reason == "estimated TTFT 9 > ttft_slo 4 (throughput estimator)"


def test_tokens_estimator_ignores_max_num_seqs():
    """The same traffic under `tokens`: x is estimated 1 step and accepted, but waits 15."""
    # x: 80 tokens queued + 10, at 100 - 2 decodes = 98 per step -> 1 step. It is admitted at
    # step 15, behind five pairs: the documented optimism when max_num_seqs binds.
    config = EngineConfig(max_num_batched_tokens=100, max_num_seqs=2)
    result = simulate(max_seqs_two(), config, admission=SloAdmission(4, "tokens"))
    assert result.summary["num_rejected"] == 0
    assert rec(result, "x").ttft == 15.0


# -- goodput --------------------------------------------------------------------------------


@pytest.mark.parametrize(("slo", "met", "attainment", "goodput"), [
    (Slo(ttft=1), 10, 0.5, 5.0),
    (Slo(ttft=2), 20, 1.0, 10.0),
    (Slo(e2e=1.5), 10, 0.5, 5.0),
    (Slo(ttft=0.5), 0, 0.0, 0.0),
    (None, None, None, None),
    (Slo(), None, None, None),
])
def test_goodput_keys_by_hand(slo, met, attainment, goodput):
    """20 one-token requests, budget 100: 10 finish at t=1 (TTFT 1), 10 at t=2; 2 steps."""
    result = simulate(burst(20, 10, 1), EngineConfig(max_num_batched_tokens=100), slo=slo)
    summary = result.summary
    assert (summary["num_slo_met"], summary["slo_attainment"], summary["goodput"]) == (
        met, attainment, goodput)


@pytest.mark.parametrize(("slo", "met"), [(Slo(e2e=2), 2), (Slo(ttft=1, e2e=3), 3),
                                          (Slo(ttft=1, e2e=4), 4), (Slo(ttft=1, e2e=0.9), 0)])
def test_goodput_keys_with_an_e2e_target(slo, met):
    """Outputs of 1..4 tokens from t=0: e2e 1..4, TTFT 1 each; the run lasts 4 steps."""
    requests = [Request(name, 0, 10, n) for n, name in enumerate("abcd", start=1)]
    summary = simulate(requests, slo=slo).summary
    assert (summary["num_slo_met"], summary["slo_attainment"], summary["goodput"]) == (
        met, met / 4, met / 4)


def test_goodput_counts_rejected_requests_as_not_served():
    """Admission's target is the default SLO; attainment is a share of all 25 requests."""
    # r0..r19 queued (estimate <= 2), all finish within TTFT 2; r20..r24 rejected; 2 steps.
    result = simulate(burst(25, 10, 1), EngineConfig(max_num_batched_tokens=100),
                      admission=SloAdmission(2))
    summary = result.summary
    assert (summary["num_rejected"], summary["num_slo_met"], summary["slo_attainment"],
            summary["goodput"]) == (5, 20, 0.8, 10.0)


def test_starved_requests_do_not_meet_the_slo():
    """A prompt over the budget never runs: not met, but it counts in the attainment share."""
    requests = [Request("a", 0, 10, 1), Request("big", 0, 150, 1)]
    summary = simulate(requests, EngineConfig(max_num_batched_tokens=100),
                       slo=Slo(ttft=5)).summary
    assert (summary["num_starved"], summary["num_slo_met"], summary["slo_attainment"]) == (
        1, 1, 0.5)


# -- under overload ---------------------------------------------------------------------------


OVERLOAD = EngineConfig(max_num_batched_tokens=128, max_num_seqs=1024, num_blocks=100_000)


@pytest.mark.parametrize("traffic", ["stream", "burst"])
@pytest.mark.parametrize("estimator", ["tokens", "throughput"])
def test_admission_raises_goodput_and_holds_the_tail_under_overload(traffic, estimator):
    """Above capacity, accepting all lets p99 TTFT run away; admission keeps it near 5."""
    # stream: 2 arrivals a step of 20 + 50 tokens = 138 tokens a step for a budget of 128.
    # burst: 300 at once.
    if traffic == "stream":
        requests = [Request(f"r{i}", i // 2, 20, 50) for i in range(600)]
    else:
        requests = burst(300, 20, 50)
    target = 5
    accept_all = simulate(requests, OVERLOAD, slo=Slo(ttft=target)).summary
    admitted = simulate(requests, OVERLOAD, slo=Slo(ttft=target),
                        admission=SloAdmission(target, estimator)).summary
    assert accept_all["num_rejected"] == 0
    assert accept_all["ttft_p99"] > 5 * target
    assert admitted["num_rejected"] > 0
    assert admitted["ttft_p99"] <= 2 * target
    assert admitted["goodput"] > 3 * accept_all["goodput"]


def test_shipped_slo_admission_scenario_holds_its_claims():
    """scenarios/slo_admission.yaml: every variant's expectation passes."""
    path = Path(__file__).resolve().parent.parent / "scenarios" / "slo_admission.yaml"
    scenario_run = run_scenario(load_scenario(path))
    assert scenario_run.checks
    assert all(check.passed for check in scenario_run.checks)
    summaries = {run.name: run.summary for run in scenario_run.runs}
    assert summaries["accept_all"]["num_rejected"] == 0
    assert summaries["admission"]["ttft_p99"] < summaries["accept_all"]["ttft_p99"] / 10


# -- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{"ttft_slo": 0}, {"ttft_slo": -1},
                                    {"ttft_slo": 1, "window": 0},
                                    {"ttft_slo": 1, "estimator": "guess"}])
def test_slo_admission_refuses_bad_values(kwargs):
    """A target must be > 0, the window >= 1, the estimator tokens or throughput."""
    with pytest.raises(ValueError):
        SloAdmission(**kwargs)


@pytest.mark.parametrize("kwargs", [{"ttft": 0}, {"e2e": -2}])
def test_slo_refuses_targets_that_are_not_positive(kwargs):
    """An SLO target of 0 or less is an error."""
    with pytest.raises(ValueError):
        Slo(**kwargs)


def scenario_file(folder: Path, **sections) -> Path:
    spec = {"name": "adm", "engine": {"max_num_batched_tokens": 100},
            "workload": {"kind": "inline", "requests": [
                {"id": f"r{i}", "prompt_len": 100, "output_len": 1} for i in range(5)]},
            **sections}
    path = folder / "adm.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("sections", [
    {"admission": {"estimator": "tokens"}},
    {"admission": {}, "slo": {"e2e": 10}},
    {"variants": [{"name": "a"}, {"name": "b", "admission": {"estimator": "throughput"}}]},
])
def test_admission_without_a_target_is_refused(tmp_path, sections):
    """No ttft_slo and no slo.ttft: load_scenario raises, `kvsched run` exits 2, writes nothing."""
    path = scenario_file(tmp_path, **sections)
    with pytest.raises(ScenarioError, match=r"admission needs a ttft_slo \(or slo.ttft\)"):
        load_scenario(path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2
    assert "admission needs a ttft_slo" in result.output
    assert not (out / "adm").exists()


def test_admission_takes_its_target_from_slo_ttft(tmp_path):
    """`admission: {}` with `slo: {ttft: 2}` rejects what a 2-step target rejects."""
    # Five 100-token prompts at t=0, budget 100: r0, r1 are estimated 1, 2 steps, then 3 each.
    path = scenario_file(tmp_path, admission={}, slo={"ttft": 2})
    (variant_run,) = run_scenario(load_scenario(path)).runs
    result = variant_run.result
    assert rejected(result) == ["r2", "r3", "r4"]
    assert rec(result, "r2").reason == "estimated TTFT 3 > ttft_slo 2 (tokens estimator)"
    assert variant_run.summary["num_slo_met"] == 2
