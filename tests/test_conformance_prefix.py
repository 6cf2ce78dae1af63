"""Prefix caching against recorded vLLM 0.33 runs (caching on), without vLLM.

The fixtures in tests/fixtures/vllm_v1_prefix/ were recorded in .venv-conformance by
    conformance/vllm_driver.py --random-prefix 45 --random-sessions 20 --seed 1 \\
        --max-steps-keep 120 --out-dir tests/fixtures/vllm_v1_prefix
which reproduces them byte for byte. Here: they cover what caching changes, the rules model
(conformance/RULES.md P1-P9 as code) agrees with every one of them, mutants of its rules are
caught, and compare.py reports hit disagreements.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance import compare as cmp  # noqa: E402
from conformance import v1_rules_model as model  # noqa: E402
from conformance.vllm_driver import random_prefix_case  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_v1_prefix"
PATHS = sorted(FIXTURES.glob("*.json"))
RECORDS = {p.stem: cmp.load(p) for p in PATHS}


def test_fixtures_are_there_small_and_cached():
    assert len(PATHS) >= 30
    for p in PATHS:
        rec = RECORDS[p.stem]
        assert p.stat().st_size < 100_000, p
        assert rec["engine"]["version"] == "0.33.0"
        assert rec["config"]["enable_prefix_caching"] is True
        assert rec["effective_config"]["enable_prefix_caching"] is True
        assert len(rec["steps"]) <= 120


def _turn_hits_its_answer(rec):
    wl = {r["id"]: r for r in rec["workload"]["requests"]}
    return any((rec["requests"][r["id"]]["prefix_hit_tokens"] or 0) > wl[r["after"]]["prompt_len"]
               for r in wl.values() if "after" in r)


def _identical_prompts(rec):
    seen = [(r["prompt_len"], str(r.get("prefix"))) for r in rec["workload"]["requests"]
            if r.get("prefix")]
    return len(seen) > len(set(seen))


def test_the_generator_draws_the_fixtures_workloads():
    """The driver's generator is deterministic: each fixture's config and workload come back
    from its name (the recorded workload also carries the arrival step of each later turn)."""
    import random
    for name, rec in RECORDS.items():
        kind, seed, index = name.split("-")
        cfg, wl = random_prefix_case(random.Random(f"{kind}:{seed[1:]}:{int(index)}"), name,
                                     True if kind == "sessions" else None)
        assert cfg == {k: rec["config"][k] for k in cfg} and wl["name"] == name
        recorded = [{k: v for k, v in r.items() if not ("after" in r and k == "arrival_step")}
                    for r in rec["workload"]["requests"]]
        assert wl["requests"] == recorded, name


def test_fixtures_cover_what_caching_changes():
    recs = list(RECORDS.values())
    summaries = [r["summary"] for r in recs]
    assert sum(s["prefix_hit_tokens"] > 0 for s in summaries) >= len(recs) // 2
    assert sum(s["evicted_blocks"] > 0 for s in summaries) >= 10
    assert sum(s["num_preemptions"] for s in summaries) >= 20
    # a preempted request resumes onto its own cached blocks
    assert any(h > 0 for r in recs for q in r["requests"].values() for h in q["hits"][1:])
    # a session's next turn hits blocks made of the previous turn's answer
    assert any(_turn_hits_its_answer(r) for r in recs)
    assert any(_identical_prompts(r) for r in recs)
    # a hit capped below a fully cached, block-aligned prompt (num_tokens - 1)
    assert any(q["hits"] and q["hits"][0] == w["prompt_len"] - r["config"]["block_size"]
               and w["prompt_len"] % r["config"]["block_size"] == 0
               for r in recs for w in r["workload"]["requests"]
               for q in [r["requests"][w["id"]]] if w.get("prefix"))
    # an admission in the same step as the request whose blocks it hits
    assert any(len(s.get("hits", [])) > 1 and any(h for _, h in s["hits"])
               for r in recs for s in r["steps"])
    configs = [r["config"] for r in recs]
    assert {c["policy"] for c in configs} == {"fcfs", "priority"}
    assert {c["enable_chunked_prefill"] for c in configs} == {True, False}
    assert {c["block_size"] for c in configs} == {4, 8, 16}
    assert any(c["long_prefill_token_threshold"] > 0 for c in configs)
    assert any(c["watermark"] > 0 for c in configs)
    assert any(not c["scheduler_reserve_full_isl"] for c in configs)
    assert any(s["num_rejected"] for s in summaries)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_the_rules_model_reproduces_vllm_with_caching(path):
    """Per step (tokens, victims, hits, cached and evicted blocks) and per request."""
    rec = RECORDS[path.stem]
    rep = cmp.compare(rec, model.decisions, strict_order=True)
    assert set(cmp.CACHE_STEP_FIELDS) <= set(rep.step_fields)
    assert rep.hits_total == len(rec["requests"])
    assert rep.agrees, cmp.side_by_side(rep)


def _disagreeing(monkeypatch, target, name, replacement):
    monkeypatch.setattr(target, name, replacement)
    return sum(not cmp.compare(r, model.decisions).agrees for r in RECORDS.values())


def test_a_hit_capped_at_num_tokens_instead_of_num_tokens_minus_1_is_caught(monkeypatch):
    lookup = model._Pool.lookup
    assert _disagreeing(monkeypatch, model._Pool, "lookup",
                        lambda self, hashes, most: lookup(self, hashes, most + 1)) > 0


def test_freeing_head_first_is_caught(monkeypatch):
    release = model._Pool.release
    assert _disagreeing(monkeypatch, model._Pool, "release",
                        lambda self, blocks: release(self, blocks[::-1])) > 0


def test_caching_blocks_only_once_computed_is_caught(monkeypatch):
    cache = model._Pool.cache
    assert _disagreeing(monkeypatch, model._Pool, "cache",
                        lambda self, r, upto, bs: cache(self, r, min(upto, r.computed), bs)) > 0


def test_evicting_the_most_recently_freed_block_is_caught(monkeypatch):
    take = model._Pool.take

    def mru(self, k):
        self.lru = dict(reversed(self.lru.items()))
        out = take(self, k)
        self.lru = dict(reversed(self.lru.items()))
        return out
    assert _disagreeing(monkeypatch, model._Pool, "take", mru) > 0


def _any_fixture():
    return next(r for r in RECORDS.values() if r["summary"]["prefix_hit_tokens"] > 0)


def test_a_wrong_hit_is_reported_and_printed():
    rec = _any_fixture()
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    rid = next(k for k, q in mine["requests"].items() if q["prefix_hit_tokens"])
    mine["requests"][rid]["prefix_hit_tokens"] -= 1
    rep = cmp.compare(rec, mine)
    assert not rep.agrees and rep.step_diffs == {}
    assert rep.hits_agree == rep.hits_total - 1
    assert set(rep.request_diffs[rid]) == {"prefix_hit_tokens"}
    text = cmp.side_by_side(rep)
    assert f"first hit disagreement: request {rid}: prefix_hit_tokens vLLM=" in text
    assert "hits" in rep.summary()


def test_cache_step_fields_are_compared_only_when_the_side_gives_them():
    rec = _any_fixture()
    mine = copy.deepcopy({"steps": rec["steps"], "requests": rec["requests"]})
    k = next(i for i, s in enumerate(mine["steps"]) if s["cached_blocks"])
    mine["steps"][k]["cached_blocks"] += 1
    rep = cmp.compare(rec, mine)
    assert rep.first_disagreement == k and set(rep.step_diffs[k]) == {"cached_blocks"}
    assert "C" in cmp.side_by_side(rep)
    for s in mine["steps"]:  # a side that reports no cache per step: not compared
        s.pop("cached_blocks")
        s.pop("hits", None)
    assert cmp.compare(rec, mine).agrees


def test_records_without_caching_count_no_hits():
    rec = cmp.load(sorted((ROOT / "tests" / "fixtures" / "vllm_v1").glob("*.json"))[0])
    rep = cmp.compare(rec, model.decisions)
    assert rep.agrees and rep.hits_total == 0 and "hits" not in rep.summary()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.booleans())
def test_model_invariants_on_random_prefix_workloads(seed, sessions):
    """Hits are whole blocks, below the tokens a request has, never more than its life's
    total; the cache never holds more blocks than the pool; no block leaks (the model
    asserts that every block is back when all requests are done)."""
    import random
    cfg, wl = random_prefix_case(random.Random(seed), "prop", sessions)
    out = model.decisions(cfg, wl)
    bs = cfg["block_size"]
    specs = {r["id"]: r for r in wl["requests"]}
    for rid, q in out["requests"].items():
        spec = specs[rid]
        assert all(h % bs == 0 and h < spec["prompt_len"] + spec["output_len"] for h in q["hits"])
        assert q["cached_tokens"] == sum(q["hits"]) >= (q["prefix_hit_tokens"] or 0)
        assert len(q["hits"]) == (q["num_preemptions"] + 1 if q["hits"] else 0) or \
            q["status"] != "finished"
    assert all(s["cached_blocks"] <= cfg["num_blocks"] - 1 for s in out["steps"])


def test_cli_self_check_reports_hits(capsys):
    assert cmp.main([str(FIXTURES), "--self", "--quiet", "--strict-order"]) == 0
    n = sum(len(r["requests"]) for r in RECORDS.values())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"{len(PATHS)}/{len(PATHS)} workloads agree 100%")
    assert last.endswith(f"hits {n}/{n}")
