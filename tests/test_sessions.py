"""Closed-loop turns: a request with `after` arrives `think_time` after the one it names ends."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_engine import reference_simulate
from test_cluster import cluster
from test_engine_reference import COMPARED
from test_engine_reference import clocks as reference_clocks
from test_engine_reference import configs as reference_configs
from test_engine_reference import policies as reference_policies
from test_invariants import check_invariants, clocks, configs

from kvsched import EngineConfig, Request, make_policy, simulate
from kvsched.timing import LinearStep, StepClock

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICIES = st.sampled_from(["fcfs", "spf", "priority"])


@st.composite
def conversations(draw, max_requests: int = 10):
    """Requests of which some are next turns of an earlier one (chains and forks)."""
    n = draw(st.integers(1, max_requests))
    requests: list[Request] = []
    for i in range(n):
        prompt = draw(st.integers(1, 60 if draw(st.integers(0, 4)) == 0 else 10))
        output = draw(st.integers(1, 24))
        after = None
        if i and draw(st.booleans()):
            after = requests[draw(st.integers(0, i - 1))].request_id
        think = draw(st.sampled_from([0.0, 0.5, 3.0])) if after else 0.0
        arrival = 0.0 if after else float(draw(st.integers(0, 12)))
        requests.append(Request(f"q{i}", arrival, prompt, output,
                                priority=draw(st.integers(0, 3)), after=after,
                                think_time=think))
    return requests


def check_turns(requests: list[Request], config: EngineConfig, result) -> None:
    """Nothing lost; each turn arrived think_time after its previous turn ended, or, if that
    one never ended, is recorded unfinished saying so; every other invariant holds with
    the arrival times the turns got."""
    records = {r.request_id: r for r in result.requests}
    assert [r.request_id for r in result.requests] == [r.request_id for r in requests]
    for request, record in zip(requests, result.requests, strict=True):
        if request.after is None:
            assert record.arrival_time == request.arrival_time
            continue
        before = records[request.after]
        if record.reason == f"its previous turn {request.after} did not end":
            assert record.status == "unfinished" and record.first_scheduled_time is None
            assert before.status == "unfinished"
        elif before.status == "finished":
            assert record.arrival_time == pytest.approx(before.finish_time + request.think_time)
        elif before.status == "rejected":
            assert record.arrival_time == pytest.approx(before.arrival_time
                                                        + request.think_time)
        else:  # found starved when nothing was left to run, or running at the stop
            assert record.arrival_time >= before.arrival_time + request.think_time
            assert before.status in ("starved", "unfinished")
    arrived = [replace(q, arrival_time=r.arrival_time)
               for q, r in zip(requests, result.requests, strict=True)]
    check_invariants(arrived, config, result)


@settings(max_examples=150, **SETTINGS)
@given(conversations(), configs(), POLICIES, clocks)
def test_no_turn_is_lost_and_each_waits_for_the_previous(requests, config, policy, clock):
    result = simulate(requests, config, make_policy(policy), clock)
    check_turns(requests, config, result)
    exact = simulate(requests, config, make_policy(policy), clock, stretches=False)
    assert exact.requests == result.requests and exact.steps == result.steps


@settings(max_examples=120, **SETTINGS)
@given(conversations(14), reference_configs(), reference_policies, reference_clocks)
def test_turns_match_the_reference_engine(requests, config, policy, clock):
    """The naive engine, releasing turns its own way, gives the same records and steps."""
    result = simulate(requests, config, policy, clock)
    expected, expected_steps = reference_simulate(requests, config, policy, clock)
    assert [row[:len(expected_steps[0])] for row in result.steps] == expected_steps
    for record in result.requests:
        want = {name: expected[record.request_id][name] for name in (*COMPARED,
                                                                     "arrival_time")}
        got = {name: getattr(record, name) for name in (*COMPARED, "arrival_time")}
        assert got == want, record.request_id


@settings(max_examples=60, **SETTINGS)
@given(conversations(), configs(), POLICIES, clocks, st.sampled_from(["round_robin",
                                                                      "session"]))
def test_one_replica_with_turns_is_simulate(requests, config, policy, clock, name):
    single = simulate(requests, config, make_policy(policy), clock)
    result = cluster(requests, config, policy, clock, 1, name)
    assert result.requests == single.requests
    assert result.events == single.events


@settings(max_examples=60, **SETTINGS)
@given(conversations(12), configs(), POLICIES, clocks, st.integers(2, 3))
def test_turns_across_replicas_keep_every_request_and_the_exact_records(requests, config,
                                                                        policy, clock, n):
    """A turn released by one replica's finish may land on another: the stretch bound
    (the other replicas' next step) keeps the per-step records."""
    fast = cluster(requests, config, policy, clock, n, "least_outstanding")
    exact = cluster(requests, config, policy, clock, n, "least_outstanding", stretches=False)
    assert fast.requests == exact.requests
    assert [r.request_id for r in fast.requests] == [r.request_id for r in requests]
    records = {r.request_id: r for r in fast.requests}
    for request in requests:
        before = records.get(request.after or "")
        if before is not None and before.status == "finished":
            assert records[request.request_id].arrival_time == pytest.approx(
                before.finish_time + request.think_time)


def test_a_turn_arrives_think_time_after_the_answer():
    """Step clock: a's answer ends at 5, b arrives at 8, c (no think time) when b ends."""
    requests = [Request("a", 0, 10, 5), Request("b", 0, 10, 5, after="a", think_time=3),
                Request("c", 0, 10, 5, after="b")]
    result = simulate(requests)
    assert [(r.arrival_time, r.finish_time) for r in result.requests] == [
        (0, 5), (8, 13), (13, 18)]


def test_turns_of_a_rejected_or_starved_request_still_come():
    """A prompt over the model length is rejected at 0; one over the budget starves: the
    next turns of both arrive and run."""
    config = EngineConfig(max_num_batched_tokens=64, max_model_len=100)
    requests = [Request("big", 0, 200, 5), Request("after_big", 0, 10, 2, after="big",
                                                   think_time=1),
                Request("wide", 0, 80, 2), Request("after_wide", 0, 10, 2, after="wide")]
    result = simulate(requests, config, make_policy("spf"))
    status = {r.request_id: (r.status, r.arrival_time) for r in result.requests}
    assert status["big"] == ("rejected", 0) and status["after_big"] == ("finished", 1)
    assert status["wide"][0] == "starved" and status["after_wide"][0] == "finished"


def test_a_run_stopped_early_records_the_turns_that_never_came():
    result = simulate([Request("a", 0, 10, 50), Request("b", 0, 10, 5, after="a")],
                      EngineConfig(max_steps=3))
    b = result.requests[1]
    assert (b.status, b.reason) == ("unfinished", "its previous turn a did not end")
    assert result.summary["num_unfinished"] == 2


@pytest.mark.parametrize("requests, problem", [
    ([Request("a", 0, 4, 2, after="z")], "request a: after 'z' names no request"),
    ([Request("a", 0, 4, 2, after="b"), Request("b", 0, 4, 2)],
     "request a: after 'b' names a later request"),
])
def test_after_must_name_an_earlier_request(requests, problem):
    for run in (lambda: simulate(requests),
                lambda: cluster(requests, EngineConfig(), "fcfs", StepClock(), 2)):
        with pytest.raises(ValueError, match=problem):
            run()


def test_a_session_cluster_run_releases_turns_on_the_replica_that_finished():
    """The session router keeps a conversation on one replica; its turns follow the answers."""
    clock = LinearStep(0.01, 0.0001, 0.001)
    requests = [Request("a1", 0, 20, 10, session="a"), Request("b1", 0, 20, 10, session="b"),
                Request("a2", 0, 40, 10, session="a", after="a1", think_time=0.5),
                Request("b2", 0, 40, 10, session="b", after="b1", think_time=0.5)]
    result = cluster(requests, EngineConfig(), "fcfs", clock, 2, "session")
    assert result.replica_of[0] == result.replica_of[2]
    assert result.replica_of[1] == result.replica_of[3]
    first, second = result.requests[0], result.requests[2]
    assert second.arrival_time == pytest.approx(first.finish_time + 0.5)
    assert all(r.status == "finished" for r in result.requests)


def test_a_cluster_run_stopped_early_writes_the_turns_that_never_came(tmp_path):
    """requests.csv of a cluster holds the turn that never arrived, with no replica."""
    import pandas as pd
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: c\nengine: {max_steps: 3}\ncluster: {replicas: 2, router: session}\n"
        "workload:\n  kind: inline\n  requests:\n"
        "    - {id: a, prompt_len: 10, output_len: 50, session: x}\n"
        "    - {id: b, prompt_len: 10, output_len: 5, session: x, after: a}\n",
        encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"),
                                      "--no-check"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "out" / "c" / "base" / "requests.csv")
    assert list(table["request_id"]) == ["a", "b"]
    assert list(table["status"]) == ["unfinished", "unfinished"]
    assert table["replica"].isna().tolist() == [False, True]
    assert table["reason"][1] == "its previous turn a did not end"


def test_in_a_cluster_a_starved_turn_releases_the_next_when_everything_is_idle():
    """Replica 0 starves a prompt over the budget at once while replica 1 serves a long
    answer: the next turn comes when the cluster has nothing left to run, not earlier."""
    config = EngineConfig(max_num_batched_tokens=64)
    clock = LinearStep(0.01, 0.0001, 0.001)
    requests = [Request("wide", 0, 80, 2), Request("long", 0, 10, 300),
                Request("next", 0, 10, 2, after="wide")]
    result = cluster(requests, config, "fcfs", clock, 2, "least_outstanding")
    assert result.replica_of == (0, 1, 1)
    wide, long, turn = result.requests
    assert (wide.status, long.status, turn.status) == ("starved", "finished", "finished")
    assert turn.arrival_time == pytest.approx(long.finish_time)
