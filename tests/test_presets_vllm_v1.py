"""The vllm_v1 preset decides as the real vLLM 0.33.0 V1 scheduler, step by step."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import v1_rules_model
from conformance.compare import compare, load, record_paths, side_by_side
from kvsched import Request, StepClock, make_policy, simulate
from kvsched.decisions import vllm_v1_decisions
from kvsched.preset_engine import engine_config

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_v1"
RECORDS = record_paths([FIXTURES])


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_every_recorded_vllm_run_agrees(path: Path) -> None:
    """Every committed real-vLLM record: every step and every request agree, including the
    order of the batch (running list, then admissions) and of the victims."""
    report = compare(load(path), vllm_v1_decisions, strict_order=True, name=path.stem)
    assert report.agrees, report.summary()


def test_fixtures_cover_the_rules() -> None:
    """The fixtures hold preemptions under both policies, chunking off and rejections."""
    records = [load(p) for p in RECORDS]
    assert len(records) == 31
    policies = {r["config"]["policy"] for r in records if r["summary"]["num_preemptions"]}
    assert policies == {"fcfs", "priority"}
    assert any(not r["config"]["enable_chunked_prefill"] for r in records)
    assert any(r["summary"]["num_rejected"] for r in records)


TIES = record_paths([Path(__file__).parent / "fixtures" / "vllm_v1_ties"])


@pytest.mark.parametrize("path", TIES, ids=[p.stem for p in TIES])
def test_recorded_same_step_ties_agree(path: Path) -> None:
    """Real-vLLM records of `vllm_driver.py --random 200 --ties --seed 3` (a step's arrivals
    share one arrival_time, ids out of input order, priority preemption): the priority ones
    are records kvsched disagreed with before its tie rules (117 of the 200 were); the two
    fcfs ones hold input order through preemptions."""
    record = load(path)
    times = [r["arrival_time"] for r in record["workload"]["requests"]]
    assert len(set(times)) < len(times)  # ties the harness's 1e-6 spacing used to hide
    report = compare(record, vllm_v1_decisions, strict_order=True, name=path.stem)
    assert report.agrees, report.summary()


def test_the_tie_fixtures_preempt_under_both_policies() -> None:
    records = [load(p) for p in TIES]
    assert {r["config"]["policy"] for r in records if r["summary"]["num_preemptions"]} == {
        "fcfs", "priority"}


ASYNC = record_paths([Path(__file__).parent / "fixtures" / "vllm_v1_async"])


def sync_decisions(config: dict, workload: dict) -> dict:
    """The same preset with async scheduling off (vLLM's sync `Scheduler`)."""
    return vllm_v1_decisions({**config, "async_scheduling": False}, workload)


@pytest.mark.parametrize("path", ASYNC, ids=[p.stem for p in ASYNC])
def test_recorded_async_runs_agree(path: Path) -> None:
    """Real-vLLM records of `AsyncScheduler` behind the engine core's batch queue
    (`vllm_driver.py --async`, RULES.md A1-A6): kvsched agrees step by step, order included;
    with async scheduling off it does not (each record is one where async decides)."""
    record = load(path)
    assert record["config"]["async_scheduling"] is True
    report = compare(record, vllm_v1_decisions, strict_order=True, name=path.stem)
    assert report.agrees, report.summary() + "\n" + side_by_side(report)
    assert not compare(record, sync_decisions).agrees


def in_flight_victims(record: dict) -> list[str]:
    """Requests preempted in the step after the one that computed their last token (A5)."""
    return [rid for step in record["steps"] for rid in step.get("preempted", [])
            if record["requests"][rid]["finish_step"] == step["step"] - 1]


def test_the_async_fixtures_cover_what_async_changes() -> None:
    """Victims whose last token was in flight under both policies (A4, A5), priority
    preemption, chunking off, watermarks, ties, rejections, and vLLM's own test cases."""
    records = [load(p) for p in ASYNC]
    assert len(records) == 14
    policies = {r["config"]["policy"] for r in records if in_flight_victims(r)}
    assert policies == {"fcfs", "priority"}
    assert any(not r["config"]["enable_chunked_prefill"] for r in records)
    assert any(r["config"]["watermark"] for r in records)
    assert any(r["summary"]["num_rejected"] for r in records)
    assert sum(r["workload"]["name"].startswith("async-ties") for r in records) == 4
    assert sum(r["workload"]["name"].startswith("async-test_") for r in records) == 3


def test_a_victim_whose_last_token_is_in_flight_finishes_without_running_again() -> None:
    """A5: preempted the step after its last token was computed, it finishes with that
    token (vLLM delivers the stale output and check_stop stops it from the queue)."""
    record = load(Path(__file__).parent / "fixtures" / "vllm_v1_async" /
                   "async-ties-s3-0125.json")
    victims = in_flight_victims(record)
    assert victims
    for rid in victims:
        request = record["requests"][rid]
        assert request["status"] == "finished" and request["num_preemptions"] >= 1
        preempted_at = next(s["step"] for s in record["steps"] if rid in s.get("preempted", []))
        assert all(rid not in dict(s["scheduled"]) for s in record["steps"]
                   if s["step"] >= preempted_at)
    assert compare(record, vllm_v1_decisions).agrees


def tied(*specs: tuple, output_len: int = 16) -> list[Request]:
    """(id, prompt_len, priority, arrival_step): the requests of one step all at one time
    (just before kvsched's step k + 1, as `reqs` puts vLLM's step k), so ties decide."""
    return [Request(rid, step + 1 - 1e-6, prompt, output_len, priority)
            for rid, prompt, priority, step in specs]


def test_equal_keys_go_by_request_id_in_the_heap_and_by_input_order_in_the_deque() -> None:
    specs = [("b", 10, 1, 0), ("a", 10, 1, 0), ("c", 10, 1, 0)]
    assert run_v1(tied(*specs), policy="priority", max_num_seqs=1).admitted == ["a", "b", "c"]
    assert run_v1(tied(*specs), policy="fcfs", max_num_seqs=1).admitted == ["b", "a", "c"]


def test_a_preempted_request_reenters_the_heap_at_its_original_key() -> None:
    """h (priority 0) and a1 run, b1 waits for a seat (max_num_seqs 2); both runners need a
    second block with one left, so a1, the max (priority, arrival), preempts itself. Back
    in the heap under (1, t, 'a1') it stands ahead of b1 (1, t, 'b1'), which was queued
    after a1 first entered: a1 is readmitted before b1."""
    run = run_v1(tied(("h", 16, 0, 0), ("a1", 16, 1, 0), ("b1", 16, 1, 0), output_len=20),
                 policy="priority", num_blocks=4, max_num_seqs=2, max_num_batched_tokens=200,
                 max_model_len=200)
    assert [rid for victims in run.preempted.values() for rid in victims][:1] == ["a1"]
    assert run.admitted[:4] == ["h", "a1", "a1", "b1"], run.admitted


def test_the_victim_among_equal_keys_is_the_first_in_the_running_list() -> None:
    """max(running, key=(priority, arrival_time)) returns the first of equal keys: p, q and
    r (equal priority and time, admitted in that order) run beside h (priority 0); when
    the pool runs out the victim is p, the earliest admitted, not r."""
    run = run_v1(tied(("h", 16, 0, 0), ("p", 16, 1, 0), ("q", 16, 1, 0), ("r", 16, 1, 0),
                      output_len=20),
                 policy="priority", num_blocks=7, max_num_seqs=4, max_num_batched_tokens=200,
                 max_model_len=200)
    assert run.admitted[:4] == ["h", "p", "q", "r"]
    victims = [rid for step in sorted(run.preempted) for rid in run.preempted[step]]
    assert victims[:1] == ["p"], run.preempted


# -- vLLM's own scheduler tests (tests/v1/core/test_scheduler.py), through the public API --


@dataclass
class Run:
    steps: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    preempted: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    admitted: list[str] = field(default_factory=list)
    first: dict[str, int | None] = field(default_factory=dict)
    finish: dict[str, int | None] = field(default_factory=dict)
    preemptions: dict[str, int] = field(default_factory=dict)


def run_v1(requests: list[Request], policy: str = "fcfs", **engine: object) -> Run:
    """`requests` under the vllm_v1 preset on the step clock (vLLM's tests' engine: its
    `create_scheduler` leaves prefix caching off unless a test turns it on, and builds the
    sync `Scheduler`)."""
    config = engine_config("vllm_v1", **{"num_blocks": 10000, "max_num_seqs": 16,
                                         "max_num_batched_tokens": 8192,
                                         "enable_prefix_caching": False,
                                         "async_scheduling": False, **engine})
    result = simulate(requests, config, make_policy(policy), StepClock(), record_batches=True)
    run = Run()
    for step, _t, rid, _kind, tokens in result.batches or ():
        run.steps[step - 1][rid] = tokens
    for step, _t, rid, event, _detail in result.events:
        if event == "preempt":
            run.preempted[step - 1].append(rid)
        elif event == "admit":
            run.admitted.append(rid)
    for r in result.requests:  # vLLM's step s is kvsched's s + 1, which ends at time s + 2
        first, finish = r.first_token_time, r.finish_time
        run.first[r.request_id] = None if first is None else round(first) - 2
        run.finish[r.request_id] = None if finish is None else round(finish) - 2
        run.preemptions[r.request_id] = r.num_preemptions
    return run


def reqs(*specs: tuple, output_len: int = 16) -> list[Request]:
    """(id, prompt_len[, priority[, arrival_step]]) in vLLM's arrival_time order: the
    requests of vLLM's step k arrive just before kvsched's step k + 1 (`run_v1` counts
    back), 1e-6 steps apart in that order: vLLM's tests give them distinct times (equal ones
    would be ordered by request id)."""
    out = []
    for i, spec in enumerate(specs):
        rid, prompt, priority, arrival = (*spec, 0, 0)[:4]
        out.append(Request(rid, arrival + 1 - (len(specs) - i) * 1e-6, prompt, output_len,
                           priority))
    return out


def test_schedule() -> None:
    """10 requests of 10 tokens all run their prompt in the first step."""
    run = run_v1(reqs(*[(str(i), 10) for i in range(10)]))
    assert run.steps[0] == {str(i): 10 for i in range(10)}
    assert run.steps[1] == {str(i): 1 for i in range(10)}


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "not_chunked"])
def test_schedule_order(chunked: bool) -> None:
    """Admissions in queue order; with chunking off the queue stops at a prompt that does
    not fit the budget left (224 of 1024 after the first 800)."""
    run = run_v1(reqs(("1", 800), ("2", 800), ("3", 10), ("4", 10)), max_num_seqs=3,
                 max_num_batched_tokens=1024, max_model_len=1024,
                 enable_chunked_prefill=chunked)
    assert run.steps[0] == ({"1": 800, "2": 224} if chunked else {"1": 800})
    assert run.steps[1] == ({"1": 1, "2": 576, "3": 10} if chunked
                            else {"1": 1, "2": 800, "3": 10})
    assert run.first["4"] == 16  # a slot frees when 1 finishes at step 15


def test_schedule_concurrent_partial_requests() -> None:
    """long_prefill_token_threshold=400 caps every chunk; running chunks come first."""
    run = run_v1(reqs(("0", 800), ("1", 800), ("2", 800)), max_num_batched_tokens=1024,
                 max_model_len=1024, long_prefill_token_threshold=400)
    assert run.steps[0] == {"0": 400, "1": 400, "2": 224}
    assert run.steps[1] == {"0": 400, "1": 400, "2": 224}
    assert run.steps[2] == {"0": 1, "1": 1, "2": 352}


def test_priority_scheduling_basic_ordering() -> None:
    """Admitted by priority, lower value first."""
    run = run_v1(reqs(("0", 10, 2), ("1", 10, 0), ("2", 10, 1)), policy="priority")
    assert run.admitted == ["1", "2", "0"]


def test_priority_scheduling_mixed_priority_and_arrival() -> None:
    """Priority first, then arrival."""
    run = run_v1(reqs(("0", 10, 2), ("2", 10, 1), ("1", 10, 1), ("3", 10, 0)),
                 policy="priority")
    assert run.admitted == ["3", "2", "1", "0"]


def test_priority_scheduling_fcfs_fallback() -> None:
    """Equal priorities are served in arrival order."""
    run = run_v1(reqs(("1", 10, 1), ("3", 10, 1), ("2", 10, 1), ("0", 10, 1)),
                 policy="priority")
    assert run.admitted == ["1", "3", "2", "0"]


def check_one_slot(specs: list[tuple], order: list[str]) -> None:
    """max_num_seqs=1: one at a time in (priority, arrival) order, 16 steps each, and a
    waiting request of higher priority never preempts for a slot."""
    run = run_v1(reqs(*specs), policy="priority", max_num_seqs=1)
    assert run.admitted == order
    assert [run.first[rid] for rid in order] == [16 * k for k in range(len(order))]
    assert not any(run.preemptions.values())


def test_priority_scheduling_waiting_queue_order() -> None:
    """One slot: the queue serves priorities 0, 1, 2, 3 in turn."""
    check_one_slot([("0", 10, 3), ("1", 10, 1), ("2", 10, 2), ("3", 10, 0)],
                   ["3", "1", "2", "0"])


def test_priority_scheduling_preemption_victim_selection() -> None:
    """One slot: nothing is preempted for a slot; priorities 0, 2, 3 run in turn."""
    check_one_slot([("0", 10, 3), ("1", 10, 2), ("2", 10, 0)], ["2", "1", "0"])


def test_priority_scheduling_equal_priority_preemption() -> None:
    """One slot, equal priorities: arrival order, no preemption among equals."""
    check_one_slot([("1", 10, 2), ("2", 10, 2), ("0", 10, 2)], ["1", "2", "0"])


def test_priority_scheduling_heap_property() -> None:
    """Eight single-token requests leave the heap in priority order, one per step."""
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    run = run_v1(reqs(*[(str(i), 10, p) for i, p in enumerate(priorities)], output_len=1),
                 policy="priority", max_num_seqs=1)
    by_priority = sorted(range(8), key=lambda i: priorities[i])
    assert [run.finish[str(i)] for i in by_priority] == list(range(8))


def test_priority_scheduling_with_limited_slots() -> None:
    """max_num_seqs=2: the two best priorities run first, the others when they finish."""
    run = run_v1(reqs(("0", 10, 3), ("1", 10, 1), ("2", 10, 2), ("3", 10, 0)),
                 policy="priority", max_num_seqs=2, max_num_batched_tokens=1000,
                 max_model_len=1000)
    assert run.steps[0] == {"3": 10, "1": 10}
    assert run.first == {"0": 16, "1": 0, "2": 16, "3": 0}


def test_priority_scheduling_no_preemption_when_space_available() -> None:
    """A high-priority arrival with blocks to spare runs beside the low ones."""
    run = run_v1(reqs(("lo1", 30, 5), ("lo2", 30, 5), ("hi1", 30, 0, 1)), policy="priority",
                 max_num_seqs=3, max_num_batched_tokens=200, max_model_len=200)
    assert run.steps[1] == {"lo1": 1, "lo2": 1, "hi1": 30}
    assert not run.preempted


def test_priority_scheduling_preemption() -> None:
    """num_blocks=6 (5 usable: block 0 is the null block). hi1 needs a 3rd block at step 2:
    the victim is lo1, already scheduled in that step, whose token is given back."""
    run = run_v1(reqs(("lo1", 32, 5), ("hi1", 32, 0, 1), output_len=40), policy="priority",
                 num_blocks=6, max_num_seqs=3, max_num_batched_tokens=200, max_model_len=200)
    assert run.steps[1] == {"lo1": 1, "hi1": 32}
    assert run.steps[2] == {"hi1": 1}
    assert run.preempted == {2: ["lo1"]}
    assert run.finish["hi1"] == 40 and run.preemptions == {"lo1": 1, "hi1": 0}


def test_priority_scheduling_preemption_and_resumption_when_out_of_kv() -> None:
    """The preempted request resumes with prompt + outputs (30 + 2 = 32 tokens) once the
    high-priority one finishes."""
    requests = [*reqs(("0", 30, 1), output_len=16), *reqs(("1", 32, 0, 1), output_len=2)]
    run = run_v1(requests, policy="priority", num_blocks=5, max_num_seqs=2,
                 max_num_batched_tokens=200, max_model_len=200)
    assert run.steps[2] == {"1": 1}
    assert run.preempted == {2: ["0"]}
    assert run.steps[3] == {"0": 32}
    assert run.finish == {"0": 16, "1": 2}


# -- beyond the recordings: the preset against RULES.md's model on random workloads --------


@st.composite
def harness_cases(draw):
    """Configs vLLM accepts and workloads in the harness's format (conformance/README.md)."""
    block_size = draw(st.sampled_from([1, 4, 16]))
    max_model_len = draw(st.sampled_from([64, 256, 2048]))
    chunked = draw(st.booleans())
    budget = draw(st.sampled_from([8, 16, 64, 256]))
    if not chunked:
        budget = max(budget, max_model_len)  # vLLM refuses a budget under max_model_len
    n = draw(st.integers(1, 14))
    requests = []
    for i in range(n):
        prompt = draw(st.integers(1, min(3 * budget, max_model_len + 4)))
        requests.append({"id": f"r{i:03d}", "prompt_len": prompt,
                         "output_len": draw(st.integers(1, 40)),
                         "arrival_step": draw(st.integers(0, 25)),
                         "priority": draw(st.integers(0, 3))})
    longest = max(min(r["prompt_len"] + r["output_len"], max_model_len) for r in requests)
    least = -(-longest // block_size) + 1  # one longest request always fits, as the harness
    config = {
        "num_blocks": least + draw(st.sampled_from([0, 1, 3, 10, 1000])),
        "block_size": block_size, "max_num_batched_tokens": budget,
        "max_num_seqs": draw(st.sampled_from([1, 2, 3, 8, 128])),
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": draw(st.sampled_from([0, 0, 1, 4, 32])),
        "policy": draw(st.sampled_from(["fcfs", "priority"])),
        "max_model_len": max_model_len,
        "scheduler_reserve_full_isl": draw(st.booleans()),
        "watermark": draw(st.sampled_from([0.0, 0.0, 0.05, 0.2])),
    }
    config["max_num_seqs"] = min(config["max_num_seqs"], budget)
    return config, {"name": "hypothesis", "requests": requests}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(harness_cases())
def test_the_preset_agrees_with_the_rules_model_on_random_workloads(case):
    """conformance/v1_rules_model.py agrees 100% with real vLLM on 2,165 recorded runs; the
    preset agrees with it on workloads nobody recorded (strict order included)."""
    config, workload = case
    model = v1_rules_model.decisions(config, workload, max_steps=20_000)
    record = {"config": config, "workload": workload, **model}
    report = compare(record, vllm_v1_decisions, strict_order=True)
    assert report.agrees, report.summary() + "\n" + side_by_side(report)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(harness_cases())
def test_the_async_preset_agrees_with_the_rules_model_on_random_workloads(case):
    """The same with async scheduling (RULES.md A1-A6): the model, which agrees 100% with
    the --async records, and the preset agree on workloads nobody recorded."""
    config, workload = case
    config = {**config, "async_scheduling": True}
    model = v1_rules_model.decisions(config, workload, max_steps=20_000)
    record = {"config": config, "workload": workload, **model}
    report = compare(record, vllm_v1_decisions, strict_order=True)
    assert report.agrees, report.summary() + "\n" + side_by_side(report)
