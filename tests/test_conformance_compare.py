"""The comparison logic of conformance/compare.py, on recorded vLLM 0.33 runs.

Needs no vLLM: the fixtures in tests/fixtures/vllm_v1/ were recorded by
conformance/vllm_driver.py in .venv-conformance (`make conformance`).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance import compare as cmp  # noqa: E402
from conformance import v1_rules_model  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_v1"
PATHS = sorted(FIXTURES.glob("*.json"))


def test_fixtures_are_there_and_small():
    assert len(PATHS) >= 12
    for p in PATHS:
        assert p.stat().st_size < 200_000, p
        rec = cmp.load(p)
        assert rec["engine"]["version"] == "0.33.0"
        assert len(rec["steps"]) < 300


def test_fixtures_cover_the_rules():
    recs = [cmp.load(p) for p in PATHS]
    assert any(r["summary"]["num_preemptions"] >= 5 for r in recs)
    assert {r["config"]["policy"] for r in recs} == {"fcfs", "priority"}
    assert {r["config"]["enable_chunked_prefill"] for r in recs} == {True, False}
    assert any(r["config"]["long_prefill_token_threshold"] > 0 for r in recs)
    assert any(r["config"]["max_num_seqs"] <= 4 for r in recs)
    assert any(r["effective_config"]["watermark_blocks"] > 0 for r in recs)
    assert any(not r["config"]["scheduler_reserve_full_isl"] for r in recs)
    assert any(r["summary"]["num_rejected"] for r in recs)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_a_record_agrees_with_itself(path):
    rec = cmp.load(path)
    rep = cmp.compare(rec, cmp.recorded_decisions(rec), strict_order=True)
    assert rep.agrees
    assert rep.step_agreement == 1.0 and rep.request_agreement == 1.0
    assert rep.first_disagreement is None
    assert rep.steps_total == len(rec["steps"])


def _busy_step(rec, after=0):
    return next(i for i, s in enumerate(rec["steps"]) if i >= after and s["scheduled"])


def test_a_perturbed_token_count_is_reported_at_its_step():
    rec = cmp.load(PATHS[0])
    k = _busy_step(rec, after=len(rec["steps"]) // 2)
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    mine["steps"][k]["scheduled"][0][1] += 1
    rep = cmp.compare(rec, lambda config, workload: mine)
    assert not rep.agrees
    assert rep.first_disagreement == k
    assert list(rep.step_diffs) == [k]
    assert set(rep.step_diffs[k]) == {"scheduled"}
    assert rep.steps_agree == rep.steps_total - 1
    text = cmp.side_by_side(rep)
    assert f"step {k} scheduled" in text and "<<" in text


def test_the_first_of_several_disagreements_is_named():
    rec = cmp.load(PATHS[1])
    a = _busy_step(rec, after=3)
    b = _busy_step(rec, after=a + 2)
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    mine["steps"][b]["scheduled"] = []
    mine["steps"][a]["preempted"] = ["nobody"]
    rep = cmp.compare(rec, mine)
    assert rep.first_disagreement == a
    assert set(rep.step_diffs) == {a, b}
    assert rep.step_diffs[a] == {"preempted": (sorted(rec["steps"][a].get("preempted", [])),
                                               sorted(rec["steps"][a].get("preempted", [])
                                                      + ["nobody"]))}


def test_per_request_fields_are_compared():
    rec = cmp.load(PATHS[2])
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    rid = next(iter(mine["requests"]))
    mine["requests"][rid]["num_preemptions"] += 2
    rep = cmp.compare(rec, mine)
    assert rep.step_diffs == {}
    assert set(rep.request_diffs) == {rid}
    assert set(rep.request_diffs[rid]) == {"num_preemptions"}
    assert rep.requests_agree == rep.requests_total - 1


def test_a_shorter_kvsched_run_disagrees_where_it_stops():
    rec = cmp.load(PATHS[3])
    cut = _busy_step(rec, after=len(rec["steps"]) - 2)
    mine = {"steps": copy.deepcopy(rec["steps"][:cut]), "requests": rec["requests"]}
    rep = cmp.compare(rec, mine)
    assert rep.first_disagreement == cut


def test_order_counts_only_when_strict():
    rec = next(r for r in map(cmp.load, PATHS)
               if any(len(s["scheduled"]) > 1 for s in r["steps"]))
    k = next(i for i, s in enumerate(rec["steps"]) if len(s["scheduled"]) > 1)
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    mine["steps"][k]["scheduled"].reverse()
    assert cmp.compare(rec, mine).agrees
    assert cmp.compare(rec, mine, strict_order=True).first_disagreement == k


def test_cli_self_check_and_missing_kvsched(capsys):
    assert cmp.main([str(FIXTURES), "--self", "--quiet"]) == 0
    assert f"{len(PATHS)}/{len(PATHS)} workloads agree 100%" in capsys.readouterr().out
    assert cmp.main([str(PATHS[0]), "--kvsched", "no_such_module:fn"]) == 2
    assert cmp.main([str(PATHS[0]), "--kvsched", "no_such_module:fn", "--allow-missing"]) == 0


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_the_rules_model_reproduces_vllm(path):
    """conformance/RULES.md, as conformance/v1_rules_model.py, decides as vLLM 0.33 did."""
    rec = cmp.load(path)
    rep = cmp.compare(rec, v1_rules_model.decisions, strict_order=True)
    assert rep.agrees, cmp.side_by_side(rep)


ASYNC = sorted((ROOT / "tests" / "fixtures").glob("vllm_v1_async*/*.json"))


@pytest.mark.parametrize("path", ASYNC, ids=[p.stem for p in ASYNC])
def test_the_rules_model_reproduces_vllm_async(path):
    """RULES.md A1-A6 as code: the model, run through the batch queue's clock, decides as
    vLLM's AsyncScheduler did; run sync on the same record, it does not."""
    rec = cmp.load(path)
    rep = cmp.compare(rec, v1_rules_model.decisions, strict_order=True)
    assert rep.agrees, cmp.side_by_side(rep)
    sync = {**rec, "config": {**rec["config"], "async_scheduling": False}}
    assert not cmp.compare(sync, v1_rules_model.decisions).agrees
