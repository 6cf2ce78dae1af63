"""kvsched's `vllm_v0` preset against recorded runs of the real vLLM 0.8.5 V0 scheduler.

Needs no vLLM: the fixtures in tests/fixtures/vllm_v0/ were recorded by
conformance/vllm_v0_driver.py in .venv-conformance-v0 (`make conformance-v0`). Each one is
compared step by step (who ran with how many tokens, who was preempted, swapped out or in,
finished, rejected) and request by request (first-token step, finish step, preemptions,
status) with `kvsched.conformance:vllm_v0_decisions`.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance import compare as cmp  # noqa: E402
from kvsched.conformance import vllm_v0_decisions, vllm_v0_engine  # noqa: E402

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
