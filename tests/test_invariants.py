"""Property tests: invariants every run keeps, over random workloads, engines, policies, clocks."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsched import (
    BATCH_COLUMNS,
    EVENT_COLUMNS,
    STEP_COLUMNS,
    ConstantStep,
    EngineConfig,
    LinearStep,
    Request,
    RunResult,
    StepClock,
    make_policy,
    simulate,
)
from kvsched.admission import SloAdmission
from kvsched.backpressure import Backpressure

STATUSES = {"finished", "starved", "unfinished", "rejected"}
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw, max_requests: int = 10, max_prompt: int = 60, max_output: int = 24):
    """A few requests: mostly short prompts, some long, arrivals in bursts (whole or
    fractional), random priorities and, sometimes, class labels."""
    n = draw(st.integers(1, max_requests))
    integral = draw(st.booleans())
    labelled = draw(st.booleans())
    requests = []
    for i in range(n):
        if integral:
            arrival = draw(st.integers(0, 12))
        else:
            arrival = round(draw(st.floats(0, 12, allow_nan=False)), 3)
        long = draw(st.integers(0, 4)) == 0
        prompt = draw(st.integers(1, max_prompt if long else max(1, max_prompt // 6)))
        requests.append(Request(
            f"q{i}", arrival, prompt, draw(st.integers(1, max_output)),
            priority=draw(st.integers(0, 3)),
            class_name=draw(st.sampled_from(["short", "long"])) if labelled else None))
    return requests


@st.composite
def configs(draw):
    """Every knob: from roomy engines to pools and budgets small enough to thrash or starve."""
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    return EngineConfig(
        max_num_batched_tokens=draw(st.sampled_from([1, 4, 16, 40, 64, 512])),
        max_num_seqs=draw(st.integers(1, 8)),
        block_size=block_size,
        num_blocks=max(2, draw(st.sampled_from([16, 48, 96, 200, 1000])) // block_size),
        watermark=draw(st.sampled_from([0.0, 0.01, 0.1, 0.3])),
        preemption=draw(st.sampled_from(["recompute", "swap"])),
        max_steps=draw(st.sampled_from([2000, 2000, 25])),
        victim=draw(st.sampled_from(["last_admitted", "lowest_priority", "fewest_generated"])),
        requeue=draw(st.sampled_from(["front", "back"])),
        mix_prefill_decode=draw(st.booleans()),
        admit_after_preempt=draw(st.booleans()),
        chunked_prefill=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 16])),
        on_unschedulable=draw(st.sampled_from(["starve", "reject"])),
    )


policies = st.builds(lambda name, aging: make_policy(name, aging=aging),
                     st.sampled_from(["fcfs", "spf", "priority", "random"]),
                     st.sampled_from([0.0, 0.0, 0.5, 4.0]))

clocks = st.one_of(
    st.just(StepClock()),
    st.sampled_from([0.02, 0.25, 1.0]).map(ConstantStep),
    st.builds(LinearStep, base=st.sampled_from([0.001, 0.01]),
              per_prefill_token=st.sampled_from([0.0, 0.0005]),
              per_decode=st.sampled_from([0.0, 0.002]),
              per_kv_token=st.sampled_from([0.0, 0.00001]),
              per_swapped_block=st.sampled_from([0.0, 0.003])),
)


def steps_of(result: RunResult) -> list[dict]:
    return [dict(zip(STEP_COLUMNS, row, strict=True)) for row in result.steps]


def check_invariants(requests: list[Request], config: EngineConfig, result: RunResult) -> None:
    """Everything that must hold for any run."""
    records = result.requests
    # None lost, none invented, input order kept.
    assert [r.request_id for r in records] == [r.request_id for r in requests]
    for request, record in zip(requests, records, strict=True):
        assert (record.arrival_time, record.prompt_len, record.output_len) == (
            request.arrival_time, request.prompt_len, request.output_len)
        assert record.status in STATUSES
        assert 0 <= record.generated_tokens <= record.output_len
        if record.status == "finished":
            assert record.generated_tokens == record.output_len
            assert record.e2e_latency >= record.ttft > 0
            assert record.finish_time >= record.first_token_time
            assert record.ttft_steps >= 1
        else:
            assert record.generated_tokens < record.output_len
            assert record.finish_time is None and record.e2e_latency is None
        if record.status in ("starved", "rejected"):
            assert record.reason
        if record.status == "rejected":
            assert record.first_scheduled_time is None and record.generated_tokens == 0
        if record.first_token_time is not None:
            assert record.first_token_time > record.first_scheduled_time >= record.arrival_time
            assert record.queue_time >= 0
            assert record.generated_tokens >= 1
        if record.num_recomputed_tokens or record.num_swapped_blocks:
            assert record.num_preemptions >= 1
        if result.time_unit == "steps" and record.ttft is not None:
            # It joins the queue at the first whole step at or after its arrival.
            wait = math.ceil(record.arrival_time) - record.arrival_time
            assert math.isclose(record.ttft - record.ttft_steps, wait, abs_tol=1e-9)

    rows = steps_of(result)
    for row in rows:
        assert 0 <= row["blocks_used"] <= config.usable_blocks
        assert row["blocks_used"] + row["blocks_free"] == config.usable_blocks
        assert row["budget_used"] <= config.max_num_batched_tokens
        assert row["budget_used"] == (row["prefill_tokens"] + row["recomputed_tokens"]
                                      + row["decode_tokens"])
        assert 0 <= row["num_running"] <= config.max_num_seqs
        assert row["duration"] > 0
        assert row["budget_used"] > 0 or row["num_preempted"] > 0  # no empty steps
        if result.time_unit == "steps":
            assert (row["time"], row["duration"]) == (row["step"], 1)
    for before, after in pairwise(rows):
        assert after["step"] > before["step"]
        assert after["time"] >= before["time"]
        assert after["time"] >= before["time"] + before["duration"] - 1e-9

    # The summary agrees with the records and the steps.
    summary = result.summary
    counts = Counter(r.status for r in records)
    assert summary["num_requests"] == len(records)
    for status in STATUSES:
        assert summary[f"num_{status}"] == counts[status]
    assert summary["num_steps"] == len(rows)
    if counts["unfinished"] == 0:
        assert summary["final_blocks_used"] == 0
    generated = sum(r.generated_tokens for r in records)
    recomputed = sum(row["recomputed_tokens"] for row in rows)
    assert summary["generated_tokens"] == generated
    assert summary["recomputed_tokens"] == recomputed == sum(
        r.num_recomputed_tokens for r in records)
    if generated:
        assert math.isclose(summary["recompute_ratio"], recomputed / generated)
    preemptions = sum(r.num_preemptions for r in records)
    assert summary["num_preemptions"] == preemptions == sum(row["num_preempted"] for row in rows)
    assert summary["swapped_blocks"] == sum(r.num_swapped_blocks for r in records) == sum(
        row["swapped_out_blocks"] + row["swapped_in_blocks"] for row in rows)
    assert summary["prefill_tokens"] == sum(row["prefill_tokens"] for row in rows)
    assert summary["peak_blocks_used"] == max((row["blocks_used"] for row in rows), default=0)
    finished_per_step = sum(row["num_finished"] for row in rows)
    assert finished_per_step == counts["finished"]
    for name in {r.class_name for r in records} - {None}:
        assert summary[f"num_requests_{name}"] == sum(r.class_name == name for r in records)

    # Events tell the same story.
    assert all(len(e) == len(EVENT_COLUMNS) for e in result.events)
    kinds = Counter((e[2], e[3]) for e in result.events)
    for record in records:
        rid = record.request_id
        assert kinds[rid, "finish"] == (record.status == "finished")
        assert kinds[rid, "starve"] == (record.status == "starved")
        assert kinds[rid, "reject"] == (record.status == "rejected")
        assert kinds[rid, "preempt"] == record.num_preemptions
        if record.status == "rejected":
            assert kinds[rid, "arrive"] == 0
        elif record.status != "unfinished" or record.first_scheduled_time is not None:
            assert kinds[rid, "arrive"] == 1
        else:  # stopped by max_steps, maybe before it arrived
            assert kinds[rid, "arrive"] <= 1
    assert [e[0] for e in result.events] == sorted(e[0] for e in result.events)

    # Batches, when recorded, add up to the step rows.
    if result.batches is not None:
        assert all(len(b) == len(BATCH_COLUMNS) for b in result.batches)
        by_step: dict[int, list[tuple]] = {}
        for entry in result.batches:
            by_step.setdefault(entry[0], []).append(entry)
        for row in rows:
            entries = by_step.pop(row["step"], [])
            prefill = sum(e[4] for e in entries if e[3] == "prefill")
            decodes = sum(1 for e in entries if e[3] in ("decode", "swap_in"))
            assert prefill == row["prefill_tokens"] + row["recomputed_tokens"]
            assert decodes == row["decode_tokens"]
            assert len({e[2] for e in entries}) == len(entries)  # one row per request
        assert not by_step


@settings(max_examples=2000, **SETTINGS)
@given(workloads(), configs(), policies, clocks, st.booleans())
def test_invariants_hold_for_any_run(requests, config, policy, clock, record_batches):
    """Statuses, tokens, blocks, budgets, clock and summary are consistent in every run."""
    result = simulate(requests, config, policy, clock, record_batches=record_batches)
    check_invariants(requests, config, result)


@st.composite
def crowded_runs(draw):
    """A burst of requests into a pool barely larger than the largest one needs: preemption
    (recompute or swap) happens in most runs."""
    block_size = draw(st.sampled_from([1, 2, 4]))
    requests = [Request(f"q{i}", draw(st.integers(0, 3)), draw(st.integers(1, 12)),
                        draw(st.integers(1, 20)), priority=draw(st.integers(0, 3)))
                for i in range(draw(st.integers(2, 8)))]
    largest = max(-(-(r.prompt_len + r.output_len - 1) // block_size) for r in requests)
    config = draw(st.builds(
        EngineConfig,
        max_num_batched_tokens=st.sampled_from([12, 16, 64]),
        max_num_seqs=st.integers(2, 8),
        block_size=st.just(block_size),
        num_blocks=st.integers(largest, 2 * largest + 2),
        watermark=st.just(0.0),
        preemption=st.sampled_from(["recompute", "swap"]),
        victim=st.sampled_from(["last_admitted", "lowest_priority", "fewest_generated"]),
        requeue=st.sampled_from(["front", "back"]),
        mix_prefill_decode=st.booleans(),
        admit_after_preempt=st.booleans(),
        chunked_prefill=st.booleans(),
        long_prefill_token_threshold=st.sampled_from([0, 4]),
    ))
    return requests, config


@settings(max_examples=1200, **SETTINGS)
@given(crowded_runs(), policies, clocks)
def test_invariants_hold_under_memory_pressure(run, policy, clock):
    """Under heavy preemption every request still finishes, with blocks and tokens accounted."""
    requests, config = run
    result = simulate(requests, config, policy, clock, record_batches=True)
    check_invariants(requests, config, result)
    # Every request fits the pool alone and the budget, so none can starve, except behind a
    # recompute victim whose prompt + generated tokens outgrew an unchunked budget.
    starved = [r for r in result.requests if r.status != "finished"]
    assert all(r.status == "starved" for r in starved)
    if starved:
        assert not config.chunked_prefill and config.preemption == "recompute"
        assert any(r.num_preemptions and r.prompt_len + r.generated_tokens
                   > config.max_num_batched_tokens for r in starved)


@settings(max_examples=150, **SETTINGS)
@given(workloads(), configs(), policies, clocks)
def test_same_inputs_give_identical_records(requests, config, policy, clock):
    """Two runs of the same inputs record exactly the same requests, steps and events."""
    first = simulate(requests, config, policy, clock, record_batches=True)
    second = simulate(list(requests), config, policy, clock, record_batches=True)
    assert first.requests == second.requests
    assert first.steps == second.steps
    assert first.events == second.events
    assert first.batches == second.batches
    assert first.summary == second.summary


@settings(max_examples=800, **SETTINGS)
@given(
    workloads(max_requests=6, max_prompt=6, max_output=8),
    st.builds(
        EngineConfig,
        max_num_batched_tokens=st.integers(1, 2),
        max_num_seqs=st.integers(1, 3),
        block_size=st.integers(1, 4),
        num_blocks=st.integers(2, 3),
        watermark=st.sampled_from([0.0, 0.4, 0.6]),
        preemption=st.sampled_from(["recompute", "swap"]),
        victim=st.sampled_from(["last_admitted", "lowest_priority", "fewest_generated"]),
        requeue=st.sampled_from(["front", "back"]),
        mix_prefill_decode=st.booleans(),
        admit_after_preempt=st.booleans(),
        chunked_prefill=st.booleans(),
        long_prefill_token_threshold=st.integers(0, 2),
    ),
    policies, clocks)
def test_absurd_engines_end_in_a_diagnosis(requests, config, policy, clock):
    """Budget 1-2 tokens and 2-3 blocks: the run returns without hitting max_steps, and
    every request ends finished, starved or rejected, never left spinning."""
    result = simulate(requests, config, policy, clock)
    check_invariants(requests, config, result)
    assert result.summary["num_unfinished"] == 0
    assert result.summary["num_steps"] < 10_000


@settings(max_examples=200, **SETTINGS)
@given(workloads(max_requests=12, max_prompt=400, max_output=40),
       st.builds(EngineConfig,
                 max_num_batched_tokens=st.just(1_000_000),
                 max_num_seqs=st.just(10_000),
                 block_size=st.sampled_from([1, 16]),
                 num_blocks=st.just(100_000),
                 preemption=st.sampled_from(["recompute", "swap"]),
                 victim=st.sampled_from(["last_admitted", "lowest_priority",
                                         "fewest_generated"]),
                 requeue=st.sampled_from(["front", "back"]),
                 admit_after_preempt=st.booleans(),
                 chunked_prefill=st.booleans()),
       clocks)
def test_roomy_engine_finishes_everyone_without_preemption(requests, config, clock):
    """Under fcfs with a huge budget and pool, every request finishes, is admitted on the step
    it arrives in, and nobody is preempted; on the step clock each decodes every step."""
    result = simulate(requests, config, make_policy("fcfs"), clock)
    check_invariants(requests, config, result)
    assert all(r.status == "finished" for r in result.requests)
    assert all(r.ttft_steps == 1 for r in result.requests)
    assert result.summary["num_preemptions"] == 0
    assert result.summary["recomputed_tokens"] == 0
    if isinstance(clock, StepClock):
        for r in result.requests:
            assert r.finish_time == math.ceil(r.arrival_time) + r.output_len
            assert r.max_token_gap in (None, 1)


@settings(max_examples=600, **SETTINGS)
@given(crowded_runs(), policies, clocks,
       st.sampled_from(["none", "pause", "reserve"]), st.sampled_from([1, 5, 50]),
       st.one_of(st.none(), st.builds(SloAdmission, st.sampled_from([0.5, 3.0, 20.0]),
                                      st.sampled_from(["tokens", "throughput"]),
                                      st.sampled_from([1, 10]))))
def test_invariants_hold_with_backpressure_and_admission(run, policy, clock, act, window,
                                                         admission):
    """Backpressure actions and SLO admission keep every invariant, and never strand work:
    whatever is not rejected still finishes (or starves only for the recompute reason)."""
    requests, config = run
    result = simulate(requests, config, policy, clock, record_batches=True, admission=admission,
                      backpressure=Backpressure(window=window, threshold=0.2, release=0.1,
                                                act=act))
    check_invariants(requests, config, result)
    for record in result.requests:
        assert record.status in ("finished", "rejected", "starved")
        if record.status == "starved":  # a recompute outgrew the budget, or waits behind one
            assert not config.chunked_prefill and config.preemption == "recompute"
            assert record.reason.startswith(("recompute of", "queued behind"))
    if admission is None:
        assert result.summary["num_rejected"] == 0
