"""`engine.async_scheduling`: vLLM V1's AsyncScheduler on kvsched's clocks (RULES.md A1-A6)."""

from __future__ import annotations

import pytest

from kvsched import ConstantStep, Request, StepClock, make_policy, simulate
from kvsched.config import EngineConfig
from kvsched.preset_engine import engine_config


def v1(async_scheduling: bool, **keys: object) -> EngineConfig:
    return engine_config("vllm_v1", **{"num_blocks": 10000, "enable_prefix_caching": False,
                                       "async_scheduling": async_scheduling, **keys})


def run(requests: list[Request], config: EngineConfig, clock=None, stretches: bool = True):
    return simulate(requests, config, make_policy("fcfs"), clock or StepClock(),
                    stretches=stretches)


def by_id(result) -> dict:
    return {r.request_id: r for r in result.requests}


def test_vllm_v1_schedules_asynchronously_by_default() -> None:
    """As `vllm serve` 0.33 (config/vllm.py: async_scheduling None becomes True); the knob
    is off elsewhere and `false` gives the sync Scheduler."""
    assert engine_config("vllm_v1").async_scheduling is True
    assert engine_config("vllm_v1", async_scheduling=False).async_scheduling is False
    assert EngineConfig().async_scheduling is False
    assert engine_config("vllm_v0").async_scheduling is False


def test_an_arrival_while_a_step_runs_starts_a_step_later() -> None:
    """A2: the step after the running one was decided when it started. `a` keeps the engine
    busy; `b` arrives mid-step at 2.5: sync admits it in the step at 3 (first token at 4),
    async in the step at 4 (first token at 5)."""
    requests = [Request("a", 0.0, 8, 20), Request("b", 2.5, 8, 4)]
    sync = by_id(run(requests, v1(False)))
    async_ = by_id(run(requests, v1(True)))
    assert sync["b"].first_token_time == 4.0
    assert async_["b"].first_token_time == 5.0
    assert async_["a"].first_token_time == sync["a"].first_token_time == 1.0
    assert async_["a"].finish_time == sync["a"].finish_time


def test_an_idle_engine_decides_at_the_arrival() -> None:
    """A2: with nothing running the first step is decided when the request comes."""
    requests = [Request("a", 0.0, 8, 4), Request("b", 30.0, 8, 4)]
    result = by_id(run(requests, v1(True)))
    assert result["a"].first_token_time == 1.0
    assert result["b"].first_token_time == 31.0


def test_a_finished_request_holds_its_seat_for_one_more_decision() -> None:
    """A4: `a` computes its last token in the step at 3; in the decision of the step at 4 it
    still counts against max_num_seqs 2 (`c` runs on), so `b` starts a step later than in
    sync."""
    requests = [Request("a", 0.0, 8, 4), Request("c", 0.0, 8, 30), Request("b", 0.5, 8, 4)]
    config = {"max_num_seqs": 2}
    sync = by_id(run(requests, v1(False, **config)))
    async_ = by_id(run(requests, v1(True, **config)))
    assert sync["a"].finish_time == async_["a"].finish_time == 4.0
    assert sync["b"].first_token_time == 5.0
    assert async_["b"].first_token_time == 6.0


def test_a_decision_that_schedules_nothing_costs_no_time() -> None:
    """A3: with max_num_seqs 1 the decision after `a`'s last step is empty (its seat is still
    taken); the engine decides again at once, so `b` starts when it would in sync."""
    requests = [Request("a", 0.0, 8, 4), Request("b", 0.5, 8, 4)]
    sync = run(requests, v1(False, max_num_seqs=1))
    async_ = run(requests, v1(True, max_num_seqs=1))
    assert by_id(async_)["b"].first_token_time == by_id(sync)["b"].first_token_time
    assert len(async_.steps) == len(sync.steps)


def test_async_adds_a_step_to_ttft_under_load_in_seconds() -> None:
    """On a constant 25 ms step, a burst arriving while the engine is busy waits one step
    more for its first token: TTFT rises by about a step, the tokens after it do not."""
    requests = [Request(f"r{i}", 0.0 if i < 8 else 0.0123 + 0.05 * i, 32, 40)
                for i in range(40)]
    clock = ConstantStep(0.025)
    sync = run(requests, v1(False, max_num_seqs=64), clock)
    async_ = run(requests, v1(True, max_num_seqs=64), clock)
    late = [r for r in by_id(async_).values() if r.arrival_time > 0]
    before = by_id(sync)
    for r in late:
        gap = (r.first_token_time - r.arrival_time) - (
            before[r.request_id].first_token_time - r.arrival_time)
        assert gap == pytest.approx(0.025)
    assert async_.summary["ttft_p50"] > sync.summary["ttft_p50"]


@pytest.mark.parametrize("caching", [False, True])
def test_stretches_change_no_record(caching: bool) -> None:
    """The decode stretches skip no decision async needs (finished requests leaving, late
    arrivals, the blocks a decode completes cached a step later)."""
    requests = [Request(f"r{i}", 0.37 * i, 20 + 7 * (i % 5), 30 + 11 * (i % 4))
                for i in range(30)]
    config = v1(True, num_blocks=60, max_num_seqs=6, enable_prefix_caching=caching)
    fast = run(requests, config, ConstantStep(0.05))
    exact = run(requests, config, ConstantStep(0.05), stretches=False)
    assert fast.steps == exact.steps
    assert fast.events == exact.events
    assert [r.as_row() for r in fast.requests] == [r.as_row() for r in exact.requests]
