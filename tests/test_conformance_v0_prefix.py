"""kvsched's `vllm_v0` preset with prefix caching against the real vLLM 0.8.5 V0 scheduler.

The fixtures in tests/fixtures/vllm_v0_prefix/ were recorded by
`conformance/vllm_v0_driver.py --random-prefix 100 --seed 1` (`make conformance-v0`), each
one a workload kvsched decided otherwise before V0's prefix-caching rules were written
(conformance/RULES.md V0-10): a fully cached prompt computes its last token again, chunks
and decodes take whole blocks of the budget, a prompt's blocks are hashed when allocated
but count as cached only from the next step, and a prompt's cached count is taken once.
Compared step by step (who ran with how many tokens computed, each admission's hit) and
request by request (first-token and finish steps, hits).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance import compare as cmp  # noqa: E402
from kvsched.decisions import vllm_v0_decisions  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_v0_prefix"
PATHS = sorted(FIXTURES.glob("*.json"))


def records() -> list[dict]:
    return [cmp.load(p) for p in PATHS]


def test_fixtures_are_there_small_and_cover_v0s_caching_rules():
    assert len(PATHS) >= 12
    recs = records()
    for path, rec in zip(PATHS, recs, strict=True):
        assert path.stat().st_size < 60_000, path
        assert rec["engine"]["version"] == "0.8.5"
        assert rec["config"]["enable_prefix_caching"] is True
        assert rec["effective_config"]["enable_prefix_caching"] is True
    configs = [r["config"] for r in recs]
    assert {c["enable_chunked_prefill"] for c in configs} == {True, False}
    assert {c["policy"] for c in configs} == {"fcfs", "priority"}
    assert any(c["max_num_partial_prefills"] > 1 for c in configs)
    assert any(c["preemption_mode"] == "swap" for c in configs)
    assert any(r["summary"]["num_preemptions"] >= 5 for r in recs)

    def fully_cached(rec: dict) -> bool:  # all its blocks cached: it computes one token
        return any(rec["requests"][q["id"]].get("prefix_hit_tokens") == q["prompt_len"] - 1
                   and q["prompt_len"] % rec["config"]["block_size"] == 0
                   for q in rec["workload"]["requests"])

    assert sum(fully_cached(r) for r in recs) >= 3

    def same_step_miss(rec: dict) -> bool:
        """Two requests of one prefix group admitted in one step, the second with no hit:
        V0 hashed the first one's blocks, but they count as cached from the next step."""
        groups = {q["id"]: q["prefix"][0][0] for q in rec["workload"]["requests"]
                  if q.get("prefix")}
        for step in rec["steps"]:
            seen: set[int] = set()
            for rid, hit in step.get("hits", []):
                group = groups.get(rid)
                if group is not None and group in seen and hit == 0:
                    return True
                if group is not None:
                    seen.add(group)
        return False

    assert sum(same_step_miss(r) for r in recs) >= 2


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_kvsched_decides_as_vllm_v0_with_prefix_caching(path):
    rec = cmp.load(path)
    rep = cmp.compare(rec, vllm_v0_decisions)
    assert rep.agrees, cmp.side_by_side(rep)
    assert rep.steps_total == len(rec["steps"])
    if any(step["scheduled"] for step in rec["steps"]):  # (else nothing ever ran)
        assert "hits" in rep.step_fields  # each admission's hit is compared, step by step
    assert rep.hits_total == len(rec["requests"])
