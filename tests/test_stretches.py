"""Decode stretches: jumping over steady decode steps gives exactly the step-by-step records.

The naive reference engine (test_engine_reference) covers the rules it models; this file
also covers what it does not (backpressure acting, SLO admission, head-of-line tracking,
long outputs that cross many blocks in one stretch) by comparing the engine with and
without stretches, and checks that stretches really happen.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import check_invariants, clocks, configs, policies

from kvsched import ConstantStep, EngineConfig, Request, StepLog, make_policy, simulate
from kvsched.admission import SloAdmission
from kvsched.backpressure import Backpressure
from kvsched.preset_engine import engine_config
from kvsched.presets import PRESETS
from kvsched.scheduler import GapTracker, Stretch

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def long_workloads(draw):
    """Few requests with long outputs, spread out: long steady stretches between events."""
    n = draw(st.integers(1, 12))
    return [Request(f"q{i}", draw(st.integers(0, 400)) / draw(st.sampled_from([1, 4])),
                    draw(st.integers(1, 80)), draw(st.integers(1, 300)),
                    priority=draw(st.integers(0, 2)))
            for i in range(n)]


@st.composite
def preset_configs(draw):
    """Every preset, with the knobs its rules read varied around it (tight pools included)."""
    preset = draw(st.sampled_from(list(PRESETS)))
    block_size = draw(st.sampled_from([1, 4, 16]))
    keys = dict(
        block_size=block_size,
        num_blocks=max(2, draw(st.sampled_from([16, 48, 96, 200, 1000])) // block_size),
        max_num_batched_tokens=draw(st.sampled_from([4, 16, 40, 64, 512])),
        max_num_seqs=draw(st.integers(1, 8)),
        max_steps=draw(st.sampled_from([2000, 2000, 25])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 16])),
        watermark=draw(st.sampled_from([0.0, 0.0, 0.01, 0.1])),
        max_model_len=draw(st.sampled_from([None, None, 64, 4096])),
        scheduler_reserve_full_isl=draw(st.booleans()),
    )
    if draw(st.booleans()):
        keys["enable_chunked_prefill"] = draw(st.booleans())
    if draw(st.booleans()):
        keys["admit_after_preempt"] = draw(st.booleans())
    if preset == "vllm_v1":
        keys["async_scheduling"] = draw(st.booleans())
    elif draw(st.booleans()):
        keys["preemption"] = "swap"
        keys["swapped_fifo"] = draw(st.booleans())
    keys["max_queued_requests"] = draw(st.sampled_from([None, None, 2, 5]))
    keys["delay_factor"] = draw(st.sampled_from([0.0, 0.0, 0.5, 3.0]))
    # SGLang's future-token admission (the sglang preset's; on the others' step orders too)
    if preset in ("lesson", "vllm_v0") and draw(st.booleans()):
        keys["admission_rule"] = "future_tokens"
    keys["schedule_conservativeness"] = draw(st.sampled_from([1.0, 1.0, 0.05, 0.3, 2.0]))
    keys["max_prefill_tokens"] = draw(st.sampled_from([16384, 16384, 24, 100]))
    if (preset == "sglang" or keys.get("admission_rule")) and draw(st.booleans()):
        keys["enable_priority_scheduling"] = True  # SGLang's preemption for a better arrival
        keys["priority_scheduling_preemption_threshold"] = draw(st.sampled_from([0, 1, 10]))
    if preset in ("lesson", "vllm_v0") and draw(st.booleans()):  # vLLM V0's partial prefills
        most = draw(st.integers(2, 4))
        threshold = draw(st.sampled_from([0, 5, 20, 50]))  # 0: 4% of max_model_len
        keys.update(enable_chunked_prefill=True, step_order="decode_first",
                    max_num_partial_prefills=most,
                    max_long_partial_prefills=draw(st.integers(1, most)),
                    long_prefill_token_threshold=threshold,
                    max_model_len=draw(st.sampled_from([None, 64, 4096])) if threshold
                    else draw(st.sampled_from([64, 4096])))
    return engine_config(preset, **keys)


def outcome(result):
    return (result.steps, result.events, [r.as_row() for r in result.requests],
            result.summary)


@settings(max_examples=300, **SETTINGS)
@given(long_workloads(), configs(), policies, clocks)
def test_stretches_equal_the_exact_path(requests, config, policy, clock):
    """Every record and summary key, with stretches on and off."""
    fast = simulate(requests, config, policy, clock)
    exact = simulate(requests, config, policy, clock, stretches=False)
    assert outcome(fast) == outcome(exact)


@settings(max_examples=150, **SETTINGS)
@given(long_workloads(), configs(), policies, clocks,
       st.sampled_from(["none", "pause", "reserve"]), st.sampled_from([5, 30, 100]),
       st.sampled_from([None, 2.0, 20.0]), st.sampled_from(["tokens", "throughput"]))
def test_stretches_equal_the_exact_path_with_backpressure_and_admission(
        requests, config, policy, clock, act, window, ttft_slo, estimator):
    """Backpressure that opens and closes admissions, and an SLO gate that keeps a window."""
    pressure = Backpressure(window=window, threshold=0.05, release=0.01, act=act)
    admission = SloAdmission(ttft_slo, estimator, window=7) if ttft_slo else None
    kwargs = dict(backpressure=pressure, admission=admission)
    fast = simulate(requests, config, policy, clock, **kwargs)
    exact = simulate(requests, config, policy, clock, stretches=False, **kwargs)
    assert outcome(fast) == outcome(exact)


@settings(max_examples=300, **SETTINGS)
@given(long_workloads(), preset_configs(), policies, clocks)
def test_stretches_equal_the_exact_path_under_every_preset(requests, config, policy, clock):
    """vllm_v1's running loop, the null block, the full-prompt gate, max_model_len and the
    other presets' rules: every record the same with stretches on and off."""
    fast = simulate(requests, config, policy, clock)
    exact = simulate(requests, config, policy, clock, stretches=False)
    assert outcome(fast) == outcome(exact)
    if config.max_model_len is None:  # a capped output finishes short of output_len
        check_invariants(requests, config, exact)


@settings(max_examples=60, **SETTINGS)
@given(long_workloads(), preset_configs(), policies, st.sampled_from(["pause", "reserve"]))
def test_stretches_equal_the_exact_path_under_presets_with_backpressure(
        requests, config, policy, act):
    """Backpressure acting on a preset's admissions keeps stretches exact."""
    kwargs = dict(backpressure=Backpressure(window=5, threshold=0.05, release=0.01, act=act))
    fast = simulate(requests, config, policy, None, **kwargs)
    exact = simulate(requests, config, policy, None, stretches=False, **kwargs)
    assert outcome(fast) == outcome(exact)


def test_a_steady_vllm_v1_run_is_mostly_stretches():
    """Under vllm_v1 a pure-decode step is a fixed point too: stretches cover it."""
    requests = [Request("a", 0, 100, 3000), Request("b", 0.5, 40, 2000)]
    config = engine_config("vllm_v1", num_blocks=400)
    log = StepLog(config.usable_blocks)
    simulate(requests, config, None, None, step_log=log)
    stretches = [s for s in log.kept if isinstance(s, Stretch)]
    assert sum(s.num_steps for s in stretches) > 2990


def test_a_steady_run_is_mostly_stretches():
    """Two long decodes on a roomy engine: a handful of segments cover thousands of steps."""
    requests = [Request("a", 0, 100, 3000), Request("b", 0.5, 40, 2000)]
    log = StepLog(180 * 16)
    result = simulate(requests, EngineConfig(num_blocks=180 * 16), None, ConstantStep(0.01),
                      step_log=log)
    stretches = [s for s in log.kept if isinstance(s, Stretch)]
    assert result.summary["num_steps"] == 3000
    assert sum(s.num_steps for s in stretches) > 2990
    assert len(log.kept) < 10
    assert result.steps == simulate(requests, EngineConfig(num_blocks=180 * 16), None,
                                    ConstantStep(0.01), stretches=False).steps


def test_a_stretch_stops_before_an_arrival_and_at_a_finish():
    """Arrivals and finishes are never inside a stretch: they fall on exact steps or end one."""
    requests = [Request("a", 0, 10, 50), Request("b", 20, 10, 5)]
    log = StepLog(180)
    simulate(requests, EngineConfig(num_blocks=180), None, None, step_log=log)
    for segment in log.kept:
        if isinstance(segment, Stretch):
            inside = range(segment.step + 1, segment.step + segment.num_steps)
            assert 20 not in inside  # b arrives at step 20: an exact step
    steps = {s.step for s in log.kept if isinstance(s, Stretch)}
    assert steps, "expected stretches"


def test_records_without_keeping_steps_still_summarise():
    """A run that streams its steps away keeps its summary exact."""
    requests = [Request(f"r{i}", i * 7, 30 + i, 40 + 3 * i) for i in range(20)]
    kept = simulate(requests, EngineConfig(num_blocks=40), make_policy("fcfs"))
    streamed = []
    log = StepLog(40, keep=False, sink=streamed.extend, chunk=5)
    dropped = simulate(requests, EngineConfig(num_blocks=40), make_policy("fcfs"),
                       step_log=log)
    assert dropped.summary == kept.summary
    assert log.kept is None and len(streamed) >= 5


def test_gap_tracker_answers_the_largest_gap_since_a_pass():
    """The stack of decreasing gaps against a plain list of end times."""
    tracker = GapTracker()
    ends = [0.0]
    for tick, end in enumerate([1.0, 3.0, 3.5, 4.0, 7.0, 7.5, 8.0, 8.2], start=1):
        tracker.complete(tick, end)
        ends.append(end)
        for since in range(1, tick + 1):
            want = max(b - a for a, b in zip(ends[since - 1:], ends[since:], strict=False))
            assert tracker.max_gap_since(since) == want
    assert tracker.max_gap_since(99) is None


@settings(max_examples=40, **SETTINGS)
@given(long_workloads(), configs(), policies,
       st.sampled_from([("meta-llama/Llama-3.1-8B", "h100-sxm", 1),
                        ("meta-llama/Llama-2-70b-hf", "a100-80gb", 4)]))
def test_stretches_equal_the_exact_path_on_the_roofline(requests, config, policy, hardware):
    """The roofline prices a stretch's steps exactly as it prices them one by one."""
    from kvsched.timing.roofline import RooflineStep

    clock = RooflineStep(*hardware)
    seconds = [Request(r.request_id, r.arrival_time / 50, r.prompt_len, r.output_len,
                       r.priority) for r in requests]
    fast = simulate(seconds, config, policy, clock)
    exact = simulate(seconds, config, policy, clock, stretches=False)
    assert outcome(fast) == outcome(exact)
