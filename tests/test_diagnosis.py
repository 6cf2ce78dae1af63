"""The incident detectors (issue 4, "Diagnosis"): each one speaks up on its incident and stays
quiet on its healthy twin, through `simulate` + `diagnose` and through scenario files.

Workloads are tiny and the figures were worked out by hand on the step clock (comments show
the working). Block arithmetic: a request holding `b` blocks of 16 decodes while prompt +
generated <= 16 b; its life needs ceil((prompt + output - 1) / 16) blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvsched import EngineConfig, Request, RunResult, make_policy, simulate
from kvsched.admission import SloAdmission
from kvsched.cli import app
from kvsched.records.diagnosis import KINDS, Incident, Thresholds, diagnose
from kvsched.records.slo import Slo
from kvsched.runner import run_scenario
from kvsched.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent


def run(requests, policy: str = "fcfs", **config) -> RunResult:
    return simulate(requests, EngineConfig(**config), make_policy(policy))


def kinds(incidents: list[Incident]) -> list[str]:
    return [incident.kind for incident in incidents]


def only(incidents: list[Incident], kind: str) -> Incident:
    (found,) = [incident for incident in incidents if incident.kind == kind]
    return found


def blocked_behind_big() -> list[Request]:
    """FCFS, budget 100: `a` runs alone, then `big` (150 tokens) blocks b and c forever."""
    # a: prefill step 0, decodes steps 1, 2 -> finishes at t=3 (e2e 3). big, b join at step 1,
    # c at step 2; big can never run, b and c wait behind it. The run ends at t=3.
    return [Request("a", 0, 10, 3), Request("big", 1, 150, 2), Request("b", 1, 10, 2),
            Request("c", 2, 10, 2)]


def short_stream(num_steps: int, num_long: int = 5, classes: bool = True) -> list[Request]:
    """Budget 100: `num_long` prompts of 90 tokens at t=0, then 5 prompts of 20 tokens at
    every step 0..num_steps-1; all produce one token."""
    long_class, short_class = ("long", "short") if classes else (None, None)
    requests = [Request(f"long{i}", 0, 90, 1, class_name=long_class) for i in range(num_long)]
    requests += [Request(f"s{k}_{j}", k, 20, 1, class_name=short_class)
                 for k in range(num_steps) for j in range(5)]
    return requests


# Under SPF the 5 shorts of each step fill the budget (5 x 20 = 100) until the stream ends:
# long i runs at step 40 + i, TTFT 41 + i, queue time 40 + i; every short has TTFT 1.
# 205 TTFTs: 200 ones then 41..45 -> p50 1, p99 at rank 0.99 * 204 = 201.96: 42 + 0.96 = 42.96.
# Long class p99: 44 + 0.96 = 44.96; short class p99: 1.
# Under FCFS the longs go first, one per step (steps 0..4, TTFT 1..5, class p99 4.96), and
# every short waits behind a backlog of 5 steps: TTFT 6 for 200 of 205 -> p50 = p99 = 6.


@pytest.fixture(scope="module")
def spf_stream() -> RunResult:
    return run(short_stream(40), "spf", max_num_batched_tokens=100)


@pytest.fixture(scope="module")
def fcfs_stream() -> RunResult:
    return run(short_stream(40), "fcfs", max_num_batched_tokens=100)


# -- starvation ---------------------------------------------------------------------------


def test_starvation_groups_the_requests_that_never_ran_by_why():
    """A prompt over the budget and the FCFS requests behind it are grouped by reason."""
    result = run(blocked_behind_big(), max_num_batched_tokens=100)
    incident = only(diagnose(result), "starvation")
    assert incident.evidence == {
        "num_starved": 3,
        "reasons": {"prompt over the budget": 1, "behind a head that never runs": 2},
        "longest_wait": 2.0,  # big and b joined at 1, the run ended at 3
    }
    assert "3 never ran (2: behind a head that never runs, 1: prompt over the budget)" \
        in incident.message


def test_starvation_names_a_request_that_never_fits_the_pool():
    """Under SPF nobody waits behind the unschedulable: each is named for its own reason."""
    # Pool 10 blocks (no watermark): huge needs ceil((90 + 100 - 1) / 16) = 12 blocks.
    requests = [Request("a", 0, 10, 2), Request("huge", 0, 90, 100), Request("big", 0, 150, 2),
                Request("b", 0, 10, 2)]
    result = run(requests, "spf", max_num_batched_tokens=100, num_blocks=10, watermark=0)
    assert [r.status for r in result.requests] == ["finished", "starved", "starved", "finished"]
    incident = only(diagnose(result), "starvation")
    assert incident.evidence["reasons"] == {"never fits the pool": 1,
                                            "prompt over the budget": 1}


def test_starvation_flags_long_prompts_overtaken_under_spf_sustained_load(spf_stream):
    """Waiting > 10x the median e2e while >= 10 later arrivals overtook them is starvation."""
    # Median e2e 1 -> limit 10; long4 waited 44 steps, overtaken by the shorts that arrived
    # after t=0 (steps 1..39: 195 of them; those of t=0 and the other longs are not later).
    incident = only(diagnose(spf_stream), "starvation")
    assert incident.evidence == {"num_overtaken": 5, "worst_overtaken": "long4",
                                 "worst_overtaken_wait": 44.0, "overtaken_by": 195}
    assert "num_starved" not in incident.evidence  # everyone finished


@pytest.mark.parametrize(("factor", "num_overtaken"), [(10, 5), (40, 4), (44, 0), (50, 0)])
def test_overtaken_factor_sets_how_long_a_wait_is_starvation(spf_stream, factor, num_overtaken):
    """A wait must exceed overtaken_factor x the median e2e (1 step): 40 is not over 40."""
    incidents = diagnose(spf_stream, Thresholds(overtaken_factor=factor))
    if num_overtaken:
        assert only(incidents, "starvation").evidence["num_overtaken"] == num_overtaken
    else:
        assert "starvation" not in kinds(incidents)


def test_a_long_wait_that_nobody_overtook_is_not_starvation():
    """r1 waits 100 steps (100x the median e2e) for memory, but no later arrival went first."""
    # Pool 25: 20 one-token requests at t=0 (e2e 1). At t=5 r0 takes 13 blocks (19 for its
    # life), r1 needs 13 of the 12 left: it runs when r0 finishes at t=105. Median e2e 1.
    requests = [Request(f"s{i}", 0, 10, 1) for i in range(20)]
    requests += [Request("r0", 5, 200, 100), Request("r1", 5, 200, 1)]
    result = run(requests, num_blocks=25, watermark=0)
    assert [r.queue_time for r in result.requests if r.request_id == "r1"] == [100.0]
    assert result.summary["e2e_p50"] == 1.0
    assert diagnose(result) == []


def test_fcfs_on_the_same_traffic_reports_nothing(fcfs_stream):
    """FCFS serves the long prompts first: no starvation, and the detectors stay quiet."""
    assert fcfs_stream.summary["num_finished"] == 205
    assert max(r.queue_time for r in fcfs_stream.requests) == 5.0  # far below 10 x 6
    assert diagnose(fcfs_stream) == []


# -- head-of-line blocking ----------------------------------------------------------------


def test_head_of_line_names_an_unschedulable_head_under_fcfs():
    """A head that can never run while b behind it would fit is named, with who it held."""
    result = run(blocked_behind_big(), max_num_batched_tokens=100)
    incident = only(diagnose(result), "head_of_line")
    evidence = incident.evidence
    assert evidence["head"] == "big"
    assert evidence["detail"].startswith("can never run")
    # Blocked from its arrival (1) to the end of the run (3); b and c held back; median e2e 3.
    assert (evidence["held_back"], evidence["longest_block"], evidence["median_e2e"],
            evidence["heads_never_ran"]) == (2, 2.0, 3.0, 1)
    assert incident.message.startswith("head_of_line: big (")


def test_head_of_line_on_a_run_where_nothing_ever_ran():
    """A head over the budget at t=0 with a request behind it: diagnosed, not a crash."""
    result = run([Request("big", 0, 150, 2), Request("a", 0, 10, 2)],
                 max_num_batched_tokens=100)
    assert result.summary["num_steps"] == 0
    incidents = diagnose(result)
    assert kinds(incidents) == ["starvation", "head_of_line", "none_finished"]
    assert only(incidents, "head_of_line").evidence["head"] == "big"


def blocked_for_ten_steps() -> RunResult:
    """Pool 20 blocks: r1 (13 blocks) waits for r0 (13, then 14) while r2 behind would fit."""
    # Step 0: r0 takes 13 blocks, 7 left: r1 needs 13 -> hol_block r1 (r2 needs 1). r0 ends
    # at t=10 (10 tokens), r1 and r2 are admitted at step 10 (hol_release) and end at t=20.
    # e2e: r0 10, r1 20, r2 20 -> median 20; the block lasted 10 steps.
    return run([Request("r0", 0, 200, 10), Request("r1", 0, 200, 10), Request("r2", 0, 16, 10)],
               num_blocks=20, watermark=0)


def test_a_transient_block_shorter_than_hol_factor_medians_is_quiet():
    """A head blocked for half the median e2e, then served, is ordinary queueing."""
    result = blocked_for_ten_steps()
    hol = [e[:4] for e in result.events if e[3].startswith("hol")]
    assert hol == [(0, 0.0, "r1", "hol_block"), (10, 10.0, "r1", "hol_release")]
    assert diagnose(result) == []


@pytest.mark.parametrize(("hol_factor", "flagged"), [(2, False), (0.5, False), (0.4, True)])
def test_hol_factor_decides_when_a_transient_block_is_an_incident(hol_factor, flagged):
    """10 steps against a median e2e of 20: flagged only when hol_factor x 20 < 10."""
    incidents = diagnose(blocked_for_ten_steps(), Thresholds(hol_factor=hol_factor))
    assert ("head_of_line" in kinds(incidents)) is flagged
    if flagged:
        evidence = only(incidents, "head_of_line").evidence
        assert (evidence["head"], evidence["held_back"], evidence["longest_block"],
                evidence["median_e2e"], evidence["heads_never_ran"]) == ("r1", 1, 10.0, 20.0, 0)


# -- thrashing ------------------------------------------------------------------------------


def four_in_eight_blocks(preemption: str = "recompute") -> RunResult:
    """4 requests of 16 + 40 tokens (4 blocks each for life) in a pool of 8 blocks."""
    # Step 0: all four take 1 block; step 1: a 2nd each (8 used). Step 17 (pass 17): r0 needs
    # a 3rd -> evicts r3; r1 takes the other freed block; r2 evicts itself. r2 and r3 had 17
    # tokens: each recomputes 16 + 17 = 33 at step 40, after r0 and r1 finish (t=40).
    return run([Request(f"r{i}", 0, 16, 40) for i in range(4)], num_blocks=8, watermark=0,
               preemption=preemption)


def test_thrashing_flags_a_small_pool_with_heavy_growth():
    """Recomputed / generated = 66 / 160 > 0.2 with 2 preemptions per 4 finished."""
    result = four_in_eight_blocks()
    incident = only(diagnose(result), "thrashing")
    evidence = incident.evidence
    assert evidence["recompute_ratio"] == pytest.approx(66 / 160)
    assert evidence["swap_ratio"] == 0
    assert evidence["preemptions_per_request"] == 0.5
    # Computed: 64 first-time prefill + 66 recomputed + 154 decodes (160 - 6 first tokens).
    assert evidence["recompute_share"] == pytest.approx(66 / 284)
    assert "recompute ratio 0.412 > 0.2, 23% of the computed tokens" in incident.message
    assert "thrashing" not in kinds(diagnose(result, Thresholds(thrash_ratio=0.5)))


def test_one_preemption_in_a_healthy_run_is_not_thrashing():
    """A huge recompute ratio from one eviction among 6 finished (1/6 < 0.2) stays quiet."""
    # Pool 33: r0 (2 blocks) and r1 (480 tokens, 30 blocks) leave 1 free; at pass 1 r0 takes
    # it and r1 evicts itself, then recomputes 481 tokens once r0 is done. 4 late requests
    # finish cleanly. Generated 20 + 20 + 4.
    requests = [Request("r0", 0, 32, 20), Request("r1", 0, 480, 20)]
    requests += [Request(f"q{i}", 100, 10, 1) for i in range(4)]
    result = run(requests, num_blocks=33, watermark=0)
    summary = result.summary
    assert (summary["num_preemptions"], summary["recomputed_tokens"],
            summary["generated_tokens"], summary["num_finished"]) == (1, 481, 44, 6)
    assert diagnose(result) == []
    incident = only(diagnose(result, Thresholds(preemptions_per_request=0.1)), "thrashing")
    assert incident.evidence["preemptions_per_request"] == pytest.approx(1 / 6)
    assert incident.evidence["recompute_ratio"] == pytest.approx(481 / 44)


def test_swap_mode_thrashing_is_flagged_by_tokens_swapped():
    """Under swap nothing is recomputed; 8 blocks x 16 tokens / 160 generated = 0.8 > 0.2."""
    result = four_in_eight_blocks("swap")
    assert result.summary["recompute_ratio"] == 0
    incident = only(diagnose(result), "thrashing")
    assert incident.evidence["swap_ratio"] == pytest.approx(0.8)  # 2 x 2 blocks out and in
    assert incident.evidence["recompute_ratio"] == 0
    assert "(8 blocks over PCIe)" in incident.message
    assert diagnose(result, Thresholds(thrash_ratio=0.8)) == []


# -- tail blow-up ---------------------------------------------------------------------------


def test_tail_blowup_against_the_baseline_spread():
    """SPF's p99/p50 (42.96) is over 5x FCFS's (1) and its p99 is worse: a blown tail."""
    config = {"max_num_batched_tokens": 100}
    spf = run(short_stream(40, classes=False), "spf", **config)
    fcfs = run(short_stream(40, classes=False), "fcfs", **config)
    incident = only(diagnose(spf, baseline=fcfs), "tail_blowup")
    assert incident.evidence == {"spread": pytest.approx(42.96), "baseline_spread": 1.0}
    assert "p99/p50 TTFT 43 vs 1 in the baseline (p99 42.96 vs 6 steps)" in incident.message
    assert "tail_blowup" not in kinds(diagnose(spf))  # no baseline, no classes: no comparison
    assert "tail_blowup" not in kinds(diagnose(spf, Thresholds(tail_ratio=50), baseline=fcfs))
    assert "tail_blowup" not in kinds(diagnose(fcfs, baseline=spf))


def test_a_wider_spread_without_a_worse_p99_is_not_a_blowup():
    """Against itself with tail_ratio 0.5 the spread qualifies, but p99 is not worse."""
    spf = run(short_stream(40, classes=False), "spf", max_num_batched_tokens=100)
    assert "tail_blowup" not in kinds(diagnose(spf, Thresholds(tail_ratio=0.5), baseline=spf))


def test_tail_blowup_names_a_class_far_above_the_others(spf_stream, fcfs_stream):
    """Long p99 44.96 vs short p99 1 under SPF, worse than FCFS's long p99 4.96."""
    incident = only(diagnose(spf_stream, baseline=fcfs_stream), "tail_blowup")
    assert incident.evidence["ttft_p99_long"] == pytest.approx(44.96)
    assert "class long p99 TTFT 44.96 steps is 45x the other classes', 9.06x the baseline's" \
        in incident.message
    alone = only(diagnose(spf_stream), "tail_blowup")  # no baseline: the classes suffice
    assert alone.evidence == {"ttft_p99_long": pytest.approx(44.96)}
    assert diagnose(spf_stream, Thresholds(class_tail_ratio=50)) == [
        only(diagnose(spf_stream), "starvation")]


def test_a_class_must_stand_out_from_every_other_class():
    """Long (90) and mid (60) prompts both wait out the stream: neither is 5x the other."""
    # Step 40: mid0 (60 tokens) runs, mid1 does not fit the 40 left: mids run at steps
    # 40..44 (p99 44.96), longs at 45..49 (p99 49.96); shorts p99 1.
    requests = short_stream(40) + [Request(f"mid{i}", 0, 60, 1, class_name="mid")
                                   for i in range(5)]
    result = run(requests, "spf", max_num_batched_tokens=100)
    summary = result.summary
    assert (summary["ttft_p99_mid"], summary["ttft_p99_long"]) == pytest.approx((44.96, 49.96))
    assert kinds(diagnose(result)) == ["starvation"]


def test_a_class_better_than_in_the_baseline_is_quiet(spf_stream):
    """40 steps of shorts vs a 60-step baseline: long p99 44.96 < 64.96 is no blow-up."""
    # With 60 steps the longs run at steps 60..64: TTFT 61..65, class p99 64 + 0.96; overall
    # p99 at rank 0.99 * 304 = 300.96 -> 61.96, spread 61.96 (not 5x 42.96).
    longer = run(short_stream(60), "spf", max_num_batched_tokens=100)
    assert longer.summary["ttft_p99_long"] == pytest.approx(64.96)
    assert "tail_blowup" not in kinds(diagnose(spf_stream, baseline=longer))
    worse = only(diagnose(longer, baseline=spf_stream), "tail_blowup")
    assert worse.evidence == {"ttft_p99_long": pytest.approx(64.96)}


# -- SLO violations ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def twenty_in_two_steps() -> RunResult:
    """20 prompts of 10 tokens at t=0, budget 100: 10 get TTFT 1, the other 10 TTFT 2."""
    return run([Request(f"r{i}", 0, 10, 1) for i in range(20)], max_num_batched_tokens=100)


@pytest.mark.parametrize(("slo", "share", "flagged"), [
    (Slo(ttft=1), 0.05, True),
    (Slo(ttft=1), 0.45, True),
    (Slo(ttft=1), 0.5, False),  # 10 of 20 missed: 0.5 is not more than 0.5
    (Slo(ttft=2), 0.05, False),
    (Slo(e2e=1), 0.05, True),
    (Slo(e2e=2), 0.05, False),
    (None, 0.0, False),
])
def test_slo_violation_above_and_below_slo_miss_share(twenty_in_two_steps, slo, share, flagged):
    """Flagged when more than slo_miss_share of the requests miss their target."""
    incidents = diagnose(twenty_in_two_steps, Thresholds(slo_miss_share=share), slo=slo)
    assert ("slo_violation" in kinds(incidents)) is flagged
    if flagged:
        evidence = only(incidents, "slo_violation").evidence
        assert evidence == {"num_missed": 10, "miss_share": 0.5, "num_rejected": 0}


def test_rejected_requests_are_not_counted_as_slo_misses():
    """Admission turns 5 of 25 away; the share is over the 20 admitted, not over all 25."""
    # Tokens estimator, budget 100, all at t=0: r_k waits ceil(10 (k + 1) / 100) steps, so
    # r0..r19 (estimate <= 2) are queued and r20..r24 (3) rejected. r0..r9 TTFT 1, r10..r19 2.
    result = simulate([Request(f"r{i}", 0, 10, 1) for i in range(25)],
                      EngineConfig(max_num_batched_tokens=100), admission=SloAdmission(2))
    assert result.summary["num_rejected"] == 5
    assert diagnose(result, slo=Slo(ttft=2)) == []  # 5 of 25 would be 20% missed
    incident = only(diagnose(result, slo=Slo(ttft=1)), "slo_violation")
    assert incident.evidence == {"num_missed": 10, "miss_share": 0.5, "num_rejected": 5}
    assert "10 of 20 admitted requests (50%) missed ttft <= 1" in incident.message
    assert "5 rejected at arrival" in incident.message


# -- through scenarios, the runner and the CLI ---------------------------------------------------


def write_scenario(folder: Path, spec: dict) -> Path:
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def inline(requests: list[Request]) -> dict:
    return {"kind": "inline", "requests": [
        {"id": r.request_id, "arrival": r.arrival_time, "prompt_len": r.prompt_len,
         "output_len": r.output_len} for r in requests]}


def test_lesson_at_its_defaults_reports_no_incident():
    """lesson.yaml: r1 blocks behind r0 for 32 steps, a third of the median e2e (96): quiet."""
    scenario_run = run_scenario(load_scenario(REPO / "scenarios" / "lesson.yaml"))
    (lesson,) = scenario_run.runs
    assert lesson.incidents == ()
    assert lesson.summary["num_incidents"] == 0
    assert all(lesson.summary[f"incident_{kind}"] == 0 for kind in KINDS)
    assert lesson.summary["incidents"] == []
    hol = [e[:4] for e in lesson.result.events if e[2] == "r1" and e[3].startswith("hol")]
    assert hol == [(0, 0.0, "r1", "hol_block"), (32, 32.0, "r1", "hol_release")]
    assert lesson.result.summary["e2e_p50"] == 96.0
    assert scenario_run.passed


def test_summary_flags_match_the_incidents(tmp_path):
    """num_incidents and incident_<kind> follow each variant's incidents, and expect sees them."""
    spec = {
        "name": "flags",
        "engine": {"max_num_batched_tokens": 100, "num_blocks": 8, "watermark": 0},
        "workload": inline(blocked_behind_big()),
        "variants": [
            {"name": "blocked"},
            {"name": "thrash", "workload": inline([Request(f"r{i}", 0, 16, 40)
                                                   for i in range(4)])},
            {"name": "calm", "workload": inline([Request("a", 0, 10, 3)])},
        ],
        "expect": [
            {"variant": "blocked", "metric": "incident_head_of_line", "op": "==", "value": 1},
            {"variant": "thrash", "metric": "incident_thrashing", "op": "==", "value": 1},
            {"variant": "calm", "metric": "num_incidents", "op": "==", "value": 0},
        ],
    }
    scenario_run = run_scenario(load_scenario(write_scenario(tmp_path, spec)))
    found = {variant_run.name: kinds(list(variant_run.incidents))
             for variant_run in scenario_run.runs}
    assert found == {"blocked": ["starvation", "head_of_line"], "thrash": ["thrashing"],
                     "calm": []}
    for variant_run in scenario_run.runs:
        summary = variant_run.summary
        assert summary["num_incidents"] == len(variant_run.incidents)
        assert {kind: summary[f"incident_{kind}"] for kind in KINDS} == {
            kind: int(kind in found[variant_run.name]) for kind in KINDS}
        assert summary["incidents"] == [i.as_dict() for i in variant_run.incidents]
    assert [check.passed for check in scenario_run.checks] == [True, True, True]


def test_thresholds_from_the_diagnosis_section_take_effect(tmp_path):
    """`diagnosis: {thrash_ratio: 10}` silences thrashing; `hol_factor: 0.4` raises hol."""
    thrash = inline([Request(f"r{i}", 0, 16, 40) for i in range(4)])
    blocked = inline([Request("r0", 0, 200, 10), Request("r1", 0, 200, 10),
                      Request("r2", 0, 16, 10)])
    spec = {
        "name": "thresholds",
        "engine": {"num_blocks": 8, "watermark": 0},
        "workload": thrash,
        "variants": [
            {"name": "default"},
            {"name": "lenient", "diagnosis": {"thrash_ratio": 10}},
            {"name": "hol", "engine": {"num_blocks": 20}, "workload": blocked},
            {"name": "hol_strict", "engine": {"num_blocks": 20}, "workload": blocked,
             "diagnosis": {"hol_factor": 0.4}},
        ],
    }
    scenario_run = run_scenario(load_scenario(write_scenario(tmp_path, spec)))
    found = {variant_run.name: kinds(list(variant_run.incidents))
             for variant_run in scenario_run.runs}
    assert found == {"default": ["thrashing"], "lenient": [], "hol": [],
                     "hol_strict": ["head_of_line"]}


def test_the_baseline_defaults_to_the_first_variant_and_can_be_named(tmp_path):
    """SPF is compared with the first variant (FCFS): a blown tail; against itself, none."""
    spec = {
        "name": "baseline",
        "engine": {"max_num_batched_tokens": 100},
        "workload": inline(short_stream(40, classes=False)),
        "variants": [
            {"name": "fcfs"},
            {"name": "spf", "policy": "spf"},
            {"name": "spf_self", "policy": "spf", "diagnosis": {"baseline": "spf_self",
                                                               "overtaken_factor": 100}},
        ],
    }
    scenario_run = run_scenario(load_scenario(write_scenario(tmp_path, spec)))
    runs = {variant_run.name: variant_run for variant_run in scenario_run.runs}
    assert kinds(list(runs["fcfs"].incidents)) == []
    tail = only(list(runs["spf"].incidents), "tail_blowup")
    assert tail.evidence == {"spread": pytest.approx(42.96), "baseline_spread": 1.0}
    assert kinds(list(runs["spf_self"].incidents)) == []


def test_kvsched_run_writes_the_incidents_into_summary_json(tmp_path):
    """summary.json carries the flags and `incidents` with kind, message and evidence."""
    spec = {"name": "blocked", "engine": {"max_num_batched_tokens": 100},
            "workload": inline(blocked_behind_big())}
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_scenario(tmp_path, spec)),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "base: starvation: 3 never ran" in result.output
    summary = json.loads((out / "blocked" / "base" / "summary.json").read_text("utf-8"))
    assert (summary["num_incidents"], summary["incident_starvation"],
            summary["incident_head_of_line"], summary["incident_thrashing"]) == (2, 1, 1, 0)
    incidents = summary["incidents"]
    assert [sorted(incident) for incident in incidents] == [["evidence", "kind", "message"]] * 2
    assert [incident["kind"] for incident in incidents] == ["starvation", "head_of_line"]
    assert incidents[0]["evidence"]["reasons"] == {"prompt over the budget": 1,
                                                   "behind a head that never runs": 2}
    assert incidents[1]["evidence"]["head"] == "big"
    assert incidents[1]["message"].startswith("head_of_line: big (can never run")


def test_kvsched_run_names_a_head_that_blocks_from_the_first_step(tmp_path):
    """An over-budget prompt first in line at t=0: starvation and head_of_line, exit 0."""
    spec = {"name": "stuck", "engine": {"max_num_batched_tokens": 100},
            "workload": inline([Request("big", 0, 150, 2), Request("a", 0, 10, 2)])}
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(write_scenario(tmp_path, spec)),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "stuck" / "base" / "summary.json").read_text("utf-8"))
    assert [incident["kind"] for incident in summary["incidents"]] == [
        "starvation", "head_of_line", "none_finished"]


# -- overload, all_rejected, none_finished (through the CLI) ----------------------------------

OVERLOAD = """\
name: load
engine: {max_num_batched_tokens: 1, chunked_prefill: true}
workload: {kind: synthetic, num_requests: 300, arrival: {kind: poisson, rate: 0.05},
           prompt_len: 100, output_len: 10}
variants:
  - {name: budget1}
  - {name: rejectall, engine: {max_num_batched_tokens: 2048, chunked_prefill: false,
                               num_blocks: 4, on_unschedulable: reject}}
  - {name: healthy, engine: {max_num_batched_tokens: 2048, chunked_prefill: false}}
  - {name: stuck, engine: {max_num_batched_tokens: 64, chunked_prefill: false},
     workload: {kind: synthetic, num_requests: 300, arrival: {kind: poisson, rate: 0.05},
                prompt_len: {kind: uniform, low: 10, high: 80}, output_len: 10}}
  - {name: nothing, engine: {max_num_batched_tokens: 50, chunked_prefill: false}}
"""


@pytest.fixture(scope="module")
def overload_runs(tmp_path_factory) -> dict[str, dict]:
    """The OVERLOAD scenario's summaries by variant, run through `kvsched run --json`."""
    import json

    from typer.testing import CliRunner

    from kvsched.cli import app

    folder = tmp_path_factory.mktemp("overload")
    path = folder / "load.yaml"
    path.write_text(OVERLOAD, encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(folder / "out"), "--json"])
    assert result.exit_code == 0, result.output
    return {s["variant"]: s for s in json.loads(result.stdout)}


def _kinds_of(summary: dict) -> list[str]:
    return [incident["kind"] for incident in summary["incidents"]]


def test_overload_is_named_with_its_evidence(overload_runs):
    """Budget 1 with chunking: arrivals outrun service, the queue grows: overload, with the
    rates and the queue lengths."""
    summary = overload_runs["budget1"]
    assert "overload" in _kinds_of(summary) and summary["incident_overload"] == 1
    incident = next(i for i in summary["incidents"] if i["kind"] == "overload")
    evidence = incident["evidence"]
    assert evidence["arrival_rate"] > 1.2 * evidence["served_rate"]
    assert evidence["waiting_last_quarter"] > 2 * evidence["waiting_first_quarter"]
    assert "arrived at" in incident["message"] and "waiting queue grew" in incident["message"]


def test_healthy_and_stuck_runs_are_not_overload(overload_runs):
    """A stream the engine keeps up with, and an engine stuck behind a head that never runs
    (idle, not overloaded), are not called overload."""
    assert "overload" not in _kinds_of(overload_runs["healthy"])
    assert overload_runs["healthy"]["num_incidents"] == 0
    stuck = _kinds_of(overload_runs["stuck"])
    assert "starvation" in stuck and "overload" not in stuck


def test_everything_rejected_is_named(overload_runs):
    """A pool no request fits, with on_unschedulable: reject: all_rejected with the reason."""
    summary = overload_runs["rejectall"]
    assert _kinds_of(summary) == ["all_rejected"]
    assert "all 300 requests were rejected" in summary["incidents"][0]["message"]


def test_nothing_finished_is_named(overload_runs):
    """Every prompt over the budget: nothing finishes, and the diagnosis says so."""
    summary = overload_runs["nothing"]
    assert "none_finished" in _kinds_of(summary)
    message = next(i["message"] for i in summary["incidents"] if i["kind"] == "none_finished")
    assert "none of the 300 requests finished (300 starved)" in message
