"""The cluster loop: one replica is `simulate()`, N replicas keep every request and block."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import check_invariants, clocks, configs, workloads

from kvsched import EngineConfig, Request
from kvsched.admission import SloAdmission
from kvsched.cluster.replicas import ReplicaSetup, run_cluster
from kvsched.policies import make_policy
from kvsched.routers import make_router
from kvsched.simulator import simulate
from kvsched.timing import LinearStep, StepClock

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
ROUTERS = ["round_robin", "random", "least_outstanding", "least_kv", "prefix_aware", "session"]


def router(name: str, n: int, seed: int = 0):
    return make_router(name, {}, n, np.random.default_rng(seed))


def cluster(requests, config, policy_name, clock, n, router_name="round_robin", **kwargs):
    setups = [ReplicaSetup(config, clock)] * n
    policies = [make_policy(policy_name) for _ in range(n)]
    return run_cluster(requests, setups, policies, router(router_name, n), **kwargs)


def same_records(single, replica) -> None:
    assert replica.requests == single.requests
    assert replica.steps == single.steps
    assert replica.events == single.events
    assert replica.summary == single.summary


@settings(**SETTINGS)
@given(workloads(max_requests=12), configs(), st.sampled_from(["fcfs", "spf", "priority"]),
       clocks, st.sampled_from(ROUTERS))
def test_one_replica_behind_any_router_is_simulate(requests, config, policy, clock, name):
    single = simulate(requests, config, make_policy(policy), clock)
    result = cluster(requests, config, policy, clock, 1, name)
    assert result.requests == single.requests
    assert {k: result.summary[k] for k in single.summary} == single.summary
    assert result.events == single.events
    same_records(single, result.replicas[0])


@settings(**SETTINGS)
@given(workloads(max_requests=14), configs(), st.sampled_from(["fcfs", "spf", "priority"]),
       clocks, st.sampled_from(ROUTERS), st.integers(2, 4), st.sampled_from([0.0, 0.0, 0.5]))
def test_invariants_hold_on_every_replica(requests, config, policy, clock, name, n, delay):
    result = cluster(requests, config, policy, clock, n, name, signal_delay=delay)
    # Every request routed once, to a real replica, and recorded once, in input order.
    assert [r.request_id for r in result.requests] == [r.request_id for r in requests]
    assert all(0 <= k < n for k in result.replica_of)
    ids = [r.request_id for rep in result.replicas for r in rep.requests]
    assert sorted(ids) == sorted(r.request_id for r in requests)
    for index, rep in enumerate(result.replicas):
        mine = [r for r, k in zip(requests, result.replica_of, strict=True) if k == index]
        check_invariants(mine, config, rep)  # blocks conserved on each replica
    assert result.summary["num_requests"] == len(requests)
    assert sum(r["num_requests"] for r in result.summary["replicas"]) == len(requests)


@settings(**SETTINGS)
@given(workloads(max_requests=10), configs(), st.sampled_from(["fcfs", "spf", "priority"]),
       clocks, st.integers(2, 4))
def test_round_robin_over_n_copies_gives_each_replica_the_single_run(requests, config, policy,
                                                                     clock, n):
    """N identical replicas fed N copies of a trace (each arrival N times at once) by
    round-robin: every replica's records are the single replica's on one copy."""
    config = replace(config, max_steps=100_000)
    requests = sorted(requests, key=lambda r: r.arrival_time)
    single = simulate(requests, config, make_policy(policy), clock)
    copies = [replace(r, request_id=f"{r.request_id}.{c}") for r in requests for c in range(n)]
    result = cluster(copies, config, policy, clock, n)
    for c, rep in enumerate(result.replicas):
        assert [r.request_id for r in rep.requests] == [f"{r.request_id}.{c}" for r in requests]
        assert [replace(r, request_id=s.request_id,
                        reason=r.reason and r.reason.replace(f".{c}", "")) for r, s in
                zip(rep.requests, single.requests, strict=True)] == single.requests
        assert rep.steps == single.steps
        keys = ("ttft_p50", "ttft_p99", "e2e_p99", "num_preemptions", "num_finished")
        assert {k: rep.summary[k] for k in keys} == {k: single.summary[k] for k in keys}


@settings(**SETTINGS)
@given(workloads(max_requests=14), configs(), st.sampled_from(["fcfs", "spf", "priority"]),
       clocks, st.sampled_from(ROUTERS), st.integers(2, 4), st.sampled_from([0.0, 0.3]),
       st.booleans())
def test_stretches_give_the_exact_per_step_records_on_every_replica(requests, config, policy,
                                                                    clock, name, n, delay,
                                                                    admit):
    """The stretch bound (the next arrival anywhere) loses nothing: jumping over steady
    decode steps gives the records of running every step, routing included."""
    admissions = [SloAdmission(2.0)] * n if admit else None
    fast = cluster(requests, config, policy, clock, n, name, signal_delay=delay,
                   admissions=admissions)
    exact = cluster(requests, config, policy, clock, n, name, signal_delay=delay,
                    admissions=admissions, stretches=False)
    assert fast.replica_of == exact.replica_of
    assert fast.requests == exact.requests
    assert fast.events == exact.events
    for a, b in zip(fast.replicas, exact.replicas, strict=True):
        assert a.steps == b.steps


def test_the_replica_whose_step_starts_first_runs_first():
    """Two replicas on a step clock: arrivals interleave by time; ties go by replica index."""
    requests = [Request("a", 0, 4, 3), Request("b", 0, 4, 3), Request("c", 1.5, 4, 1)]
    result = cluster(requests, EngineConfig(), "fcfs", StepClock(), 2)
    assert result.replica_of == (0, 1, 0)
    times = [(e[1], k) for e, k in zip(result.events, result.event_replicas, strict=True)]
    assert times == sorted(times)
    c = result.requests[2]
    assert c.first_scheduled_time == 2  # joins replica 0 at its next whole step


def test_a_stretch_stops_at_the_next_arrival_anywhere():
    """Replica 0 decodes steadily; an arrival routed to replica 1 must not be missed by the
    stretch bound, and the records equal the exact per-step path."""
    clock = LinearStep(0.01, 0.0001, 0.001)
    requests = [Request("long", 0, 10, 200), Request("late", 0.5, 10, 5),
                Request("later", 0.9, 10, 5)]
    fast = cluster(requests, EngineConfig(), "fcfs", clock, 2, "least_outstanding")
    assert fast.replica_of == (0, 1, 1)
    late = fast.requests[1]
    assert late.first_scheduled_time == pytest.approx(0.5)
    assert fast.requests[2].first_scheduled_time == pytest.approx(0.9)


def test_signal_delay_hides_recent_routing():
    """With a delay the router sees queues as they were: a burst lands on one replica."""
    requests = [Request(f"r{i}", 1.0 + i * 0.001, 10, 5) for i in range(4)]
    clock = LinearStep(0.01, 0.0001, 0.001)
    live = cluster(requests, EngineConfig(), "fcfs", clock, 2, "least_outstanding")
    stale = cluster(requests, EngineConfig(), "fcfs", clock, 2, "least_outstanding",
                    signal_delay=0.5)
    assert live.replica_of == (0, 1, 0, 1)
    assert stale.replica_of == (0, 0, 0, 0)


def test_cluster_summary_has_cluster_figures_and_a_row_per_replica():
    requests = [Request(f"r{i}", i * 0.1, 20, 10) for i in range(12)]
    result = cluster(requests, EngineConfig(), "fcfs", LinearStep(0.01, 0.0001, 0.001), 3)
    s = result.summary
    assert s["num_replicas"] == 3
    assert [r["num_requests"] for r in s["replicas"]] == [4, 4, 4]
    assert s["replica_load_imbalance"] == 1.0
    assert s["num_finished"] == 12
    assert 0 < s["busy_fraction"] <= 1


def test_a_router_returning_a_bad_index_is_refused():
    class Bad:
        def route(self, request, replicas):
            return 7

    setups = [ReplicaSetup(EngineConfig(), StepClock())] * 2
    with pytest.raises(ValueError, match="router returned 7"):
        run_cluster([Request("a", 0, 4, 2)], setups, [make_policy("fcfs")] * 2, Bad())


def test_delayed_views_forget_only_what_no_later_view_needs(monkeypatch):
    """Pruning old snapshots (here after every one) changes no routing decision."""
    requests = [Request(f"r{i}", i * 0.013, 10 + i % 50, 5 + i % 17) for i in range(300)]
    clock = LinearStep(0.01, 0.0001, 0.001)
    kept = cluster(requests, EngineConfig(), "fcfs", clock, 3, "least_outstanding",
                   signal_delay=0.05)
    monkeypatch.setattr("kvsched.cluster.replicas._PRUNE", 1)
    pruned = cluster(requests, EngineConfig(), "fcfs", clock, 3, "least_outstanding",
                     signal_delay=0.05)
    assert pruned.replica_of == kept.replica_of
    assert pruned.requests == kept.requests


@pytest.mark.parametrize("pass_after", [True, False])
def test_the_loops_collector_pause_ends_with_one_full_pass_only_when_asked(pass_after):
    """`collector_off` leaves what a loop made to one full pass as it ends; a stretch that
    keeps nothing (`pass_after=False`, the cluster's event merge) ends with none."""
    import gc

    from kvsched.cluster.loop import LOOP_LEFT, collector_off

    passes: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            passes.append(info["generation"])

    was_on = gc.isenabled()
    gc.enable()
    gc.callbacks.append(seen)
    try:
        with collector_off(pass_after=pass_after):
            kept = [[k] for k in range(LOOP_LEFT + 1000)]
            assert not gc.isenabled()
        assert gc.isenabled()
        assert (2 in passes) == pass_after, passes  # (young passes may follow: not full ones)
    finally:
        gc.callbacks.remove(seen)
        if not was_on:
            gc.disable()
    assert len(kept) == LOOP_LEFT + 1000


def test_a_request_id_used_twice_is_refused():
    config = EngineConfig(num_blocks=40, max_num_batched_tokens=64)
    twice = [Request("a", 0.0, 10, 2), Request("b", 0.1, 10, 2), Request("a", 0.2, 10, 2)]
    with pytest.raises(ValueError, match="duplicate request_id 'a'"):
        cluster(twice, config, "fcfs", StepClock(), 2)
