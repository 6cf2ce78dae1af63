"""kvsched's `vllm_v0` preset against recorded runs of the real vLLM 0.8.5 V0 scheduler.

Needs no vLLM: the fixtures in tests/fixtures/vllm_v0/ were recorded by
conformance/vllm_v0_driver.py in .venv-conformance-v0 (`make conformance-v0`). Each one is
compared step by step (who ran with how many tokens, who was preempted, swapped out or in,
finished, rejected) and request by request (first-token step, finish step, preemptions,
status) with `kvsched.decisions:vllm_v0_decisions`.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance import compare as cmp  # noqa: E402
from kvsched.decisions import vllm_v0_decisions, vllm_v0_engine  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_v0"
PATHS = sorted(FIXTURES.glob("*.json"))

def test_fixtures_are_there_small_and_cover_v0s_rules():
    assert len(PATHS) >= 15
    recs = [cmp.load(p) for p in PATHS]
    for p, rec in zip(PATHS, recs, strict=True):
        assert p.stat().st_size < 60_000, p
        assert rec["engine"] == {"name": "vllm", "version": "0.8.5",
                                 "scheduler": "vllm.core.scheduler.Scheduler"}
    configs = [r["config"] for r in recs]
    assert {c["enable_chunked_prefill"] for c in configs} == {True, False}
    assert {c["policy"] for c in configs} == {"fcfs", "priority"}
    assert {c["preemption_mode"] for c in configs} == {None, "recompute", "swap"}
    assert any(c["max_num_partial_prefills"] > 1 for c in configs)
    assert any(c["max_num_seqs"] <= 4 for c in configs)
    assert any(r["effective_config"]["watermark_blocks"] > 0 for r in recs)
    assert any(r["summary"]["num_swaps"] >= 5 for r in recs)
    assert any(r["summary"]["num_preemptions"] - r["summary"]["num_swaps"] >= 5 for r in recs)
    assert any(r["summary"]["num_rejected"] for r in recs)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_kvsched_decides_as_vllm_v0(path):
    rec = cmp.load(path)
    rep = cmp.compare(rec, vllm_v0_decisions)
    assert rep.agrees, cmp.side_by_side(rep)
    assert rep.steps_total == len(rec["steps"])


def test_the_fixtures_exercise_v0s_chunked_queue_order():
    """Several prefills at once (partial prefills) is where V0's one-queue running loop
    decides: a prefill completed in its first step sits behind the prefills under way."""
    recs = [cmp.load(p) for p in PATHS]
    assert sum(r["config"]["max_num_partial_prefills"] > 1 for r in recs) >= 5
    assert any(r["config"]["max_num_partial_prefills"] > 1 and r["summary"]["num_swaps"] >= 5
               for r in recs)


def test_a_swap_the_preset_misses_is_reported_at_its_step():
    """The comparison sees the V0-only fields: drop one swap-in from the record."""
    path = next(p for p in PATHS
                if any(s.get("swapped_in") for s in cmp.load(p)["steps"]))
    rec = copy.deepcopy(cmp.load(path))
    k = next(i for i, s in enumerate(rec["steps"]) if s.get("swapped_in"))
    del rec["steps"][k]["swapped_in"]
    rep = cmp.compare(rec, vllm_v0_decisions)
    assert rep.first_disagreement == k
    assert set(rep.step_diffs[k]) == {"swapped_in"}


def test_the_harness_config_maps_to_the_preset():
    """vLLM's defaults where the record leaves keys out; chunking picks V0's chunked rules."""
    plain = vllm_v0_engine({"max_model_len": 4096})
    assert (plain.max_num_batched_tokens, plain.watermark, plain.chunked_prefill) == (
        4096, 0.01, False)
    assert plain.step_order.value == "prefill_first" and plain.priority_preemption
    chunked = vllm_v0_engine({"enable_chunked_prefill": True, "preemption_mode": "swap"})
    assert chunked.max_num_batched_tokens == 2048
    assert chunked.step_order.value == "decode_first" and not chunked.priority_preemption
    assert chunked.victim.value == "queue_tail" and chunked.preemption.value == "swap"


# -- ties: a step's arrivals at one arrival_time (vllm_v0_driver.py --ties) ----------------

TIES = sorted((ROOT / "tests" / "fixtures" / "vllm_v0_ties").glob("*.json"))
RANDOM_TIES = [p for p in TIES if p.stem.startswith("v0-ties-")]


def _victims(steps: list[dict]) -> dict[int, tuple[list, list]]:
    """Per step, the preempted and swapped-out requests in the order they were picked."""
    return {int(s["step"]): (list(s.get("preempted", [])), list(s.get("swapped_out", [])))
            for s in steps if s.get("preempted") or s.get("swapped_out")}


@pytest.mark.parametrize("path", TIES, ids=[p.stem for p in TIES])
def test_recorded_same_step_ties_agree(path):
    """Real-vLLM 0.8.5 records (`--random 200 --ties --seed 3`, and two built by hand) in
    which requests share an arrival_time: kvsched decides as V0 did, step by step, and picks
    its victims in V0's order."""
    rec = cmp.load(path)
    times = [r["arrival_time"] for r in rec["workload"]["requests"]]
    assert len(set(times)) < len(times)  # ties the harness's 1e-6 spacing used to hide
    rep = cmp.compare(rec, vllm_v0_decisions)
    assert rep.agrees, cmp.side_by_side(rep)
    ours = vllm_v0_decisions(rec["config"], rec["workload"])
    assert _victims(ours["steps"]) == _victims(rec["steps"])


def test_the_tie_fixtures_cover_both_policies_and_both_preemption_modes():
    recs = [cmp.load(p) for p in RANDOM_TIES]
    preempting = [r for r in recs if r["summary"]["num_preemptions"]]
    assert {r["config"]["policy"] for r in preempting} == {"fcfs", "priority"}
    assert {r["config"]["enable_chunked_prefill"] for r in preempting} == {True, False}
    assert any(r["summary"]["num_swaps"] for r in preempting)
    assert any(r["summary"]["num_preemptions"] > r["summary"]["num_swaps"] for r in preempting)
    # V0 sorts its queues by (priority, arrival_time) only without chunking
    assert sum(r["config"]["policy"] == "priority" and not r["config"]["enable_chunked_prefill"]
               for r in preempting) >= 4


@pytest.mark.parametrize("path", RANDOM_TIES, ids=[p.stem for p in RANDOM_TIES])
def test_breaking_the_ties_by_request_id_would_disagree(path):
    """The fixtures' ties decide: fed each step's arrivals in request-id order (the order
    vLLM V1's heap would give equal keys), kvsched no longer matches V0, which never
    compares ids (its deques keep input order, its priority sorts are stable)."""
    rec = cmp.load(path)
    by_id = copy.deepcopy(rec["workload"])
    by_id["requests"].sort(key=lambda r: (int(r["arrival_step"]), r["id"]))  # V1: str order
    assert [r["id"] for r in by_id["requests"]] != [r["id"] for r in rec["workload"]["requests"]]
    rep = cmp.compare(rec, vllm_v0_decisions(rec["config"], by_id))
    assert not rep.agrees


def _hand_built(name: str) -> dict:
    return cmp.load(ROOT / "tests" / "fixtures" / "vllm_v0_ties" / f"{name}.json")


def test_equal_priority_and_time_keep_input_order_in_v0s_sorted_queue():
    """b, a, c at one time and priority, one seat (max_num_seqs 1): V0 sorts its waiting
    deque in every step without a prefill (`_schedule_priority_preemption`), and
    `sorted(..., key=(priority, arrival_time))` is stable, so they run b, a, c (vLLM V1's
    heap would take a, b, c). Recorded by the real scheduler."""
    rec = _hand_built("equal-keys-keep-input-order")
    ours = vllm_v0_decisions(rec["config"], rec["workload"])

    def prefills(steps):
        return [rid for s in steps for rid, n in s["scheduled"] if n > 1]

    assert prefills(rec["steps"]) == ["b", "a", "c"]
    assert prefills(ours["steps"]) == ["b", "a", "c"]


def test_the_priority_victim_among_equal_keys_is_the_last_admitted():
    """z then y (one time, priority 1) run; h (priority 0) arrives with both seats taken.
    V0 sorts the running queue stably by (priority, arrival_time) and pops its tail: y, the
    later of the equal keys (vLLM V1's max() would take z). y re-enters at the waiting
    front and is readmitted once h is done. Recorded by the real scheduler."""
    rec = _hand_built("victim-is-the-last-of-equal-keys")
    ours = vllm_v0_decisions(rec["config"], rec["workload"])
    assert _victims(rec["steps"]) == {1: (["y"], [])}
    assert _victims(ours["steps"]) == {1: (["y"], [])}
