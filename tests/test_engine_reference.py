"""The lazy engine matches a naive per-request reference engine exactly, on random workloads."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_engine import reference_simulate

from kvsched import (
    STEP_COLUMNS,
    ConstantStep,
    EngineConfig,
    LinearStep,
    Request,
    StepClock,
    make_policy,
    simulate,
)

STEP_COLUMNS_CHECKED = STEP_COLUMNS[:STEP_COLUMNS.index("thrash_ratio")]
COMPARED = ("status", "first_scheduled_time", "first_token_time", "finish_time", "ttft",
            "ttft_steps", "num_preemptions", "num_recomputed_tokens", "num_swapped_blocks",
            "max_token_gap", "generated_tokens")


@st.composite
def workloads(draw):
    """Mostly short prompts with a few long ones, arriving in bursts."""
    n = draw(st.integers(1, 24))
    integral = draw(st.booleans())
    tiny = draw(st.integers(0, 3)) == 0  # many tiny prompts: batches wider than the budget
    requests = []
    for i in range(n):
        arrival = draw(st.integers(0, 30)) if integral else draw(
            st.floats(0, 30, allow_nan=False).map(lambda x: round(x, 3)))
        long = draw(st.integers(0, 5)) == 0
        if tiny:
            prompt = draw(st.integers(1, 3))
        else:
            prompt = draw(st.integers(40, 300) if long else st.integers(1, 40))
        requests.append(Request(f"q{i}", arrival, prompt, draw(st.integers(1, 60)),
                                priority=draw(st.integers(0, 3))))
    return requests


@st.composite
def configs(draw):
    """Engines from roomy to starved, so that preemption and budget limits happen often."""
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    tokens_in_pool = draw(st.sampled_from([48, 120, 160, 240, 400, 2000]))
    return EngineConfig(
        max_num_batched_tokens=draw(st.sampled_from([3, 8, 32, 64, 80, 256, 1024])),
        max_num_seqs=draw(st.integers(1, 16)),
        block_size=block_size,
        num_blocks=max(2, tokens_in_pool // block_size),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.05, 0.2])),
        preemption=draw(st.sampled_from(["recompute", "swap"])),
        victim=draw(st.sampled_from(["last_admitted", "lowest_priority", "fewest_generated"])),
        requeue=draw(st.sampled_from(["front", "back"])),
        mix_prefill_decode=draw(st.booleans()),
        admit_after_preempt=draw(st.booleans()),
        chunked_prefill=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 8, 48])),
        on_unschedulable=draw(st.sampled_from(["starve", "reject"])),
        max_steps=draw(st.sampled_from([3000, 3000, 40])),
    )


policies = st.builds(
    lambda name, aging: make_policy(name, aging=aging),
    st.sampled_from(["fcfs", "spf", "priority"]), st.sampled_from([0.0, 0.5, 3.0]))
clocks = st.sampled_from([StepClock(), ConstantStep(0.25),
                          LinearStep(base=0.01, per_prefill_token=0.001, per_decode=0.002,
                                     per_kv_token=0.0001, per_swapped_block=0.003)])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), configs(), policies, clocks)
def test_lazy_engine_equals_reference(requests, config, policy, clock):
    """Request records and step rows are identical to the naive engine's."""
    result = simulate(requests, config, policy, clock)
    expected, expected_steps = reference_simulate(requests, config, policy, clock)
    assert [row[:len(STEP_COLUMNS_CHECKED)] for row in result.steps] == expected_steps
    for record in result.requests:
        want = {name: expected[record.request_id][name] for name in COMPARED}
        got = {name: getattr(record, name) for name in COMPARED}
        assert got == want, record.request_id
