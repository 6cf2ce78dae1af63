"""The sglang preset's SGLang 0.5.23 rules, each with numbers derived by hand from the source:
the future-token reservation and its ratio, the batch-full latch, max_prefill_tokens, the
chunk rounded to pages, retraction, schedule_conservativeness, chunked_prefill_size, random."""

from __future__ import annotations

import pytest

from kvsched import Request, make_policy, simulate
from kvsched.preset_engine import engine_config
from kvsched.reservation import NewTokenRatio
from kvsched.schema import EngineSpec


def admission_steps(result) -> dict[str, int]:
    """Step of each request's admission (step s runs from s to s + 1 on the step clock)."""
    return {r.request_id: int(r.first_scheduled_time) for r in result.requests}


def admits(result) -> dict[str, str]:
    return {rid: detail for _step, _time, rid, kind, detail in result.events if kind == "admit"}


def test_ratio_starts_at_0_7_decays_per_pass_to_its_floor():
    """init = min(0.7 x conservativeness, 1); min = init x 0.14; decay = (init - min) / 600."""
    ratio = NewTokenRatio(1.0)
    assert (ratio.init, ratio.min) == (0.7, pytest.approx(0.098))
    assert ratio.decay == pytest.approx(0.602 / 600)
    ratio.decay_steps(5)
    assert ratio.current == pytest.approx(0.7 - 5 * 0.602 / 600)
    ratio.decay_steps(10_000)
    assert ratio.current == ratio.min
    assert NewTokenRatio(2.0).init == 1.0  # clipped to 1
    assert NewTokenRatio(0.1).init == pytest.approx(0.07)


def test_ratio_after_a_retraction_comes_from_the_requests_left():
    """min(1, (sum generated + 20 x n) / (sum max_new_tokens + 1)) over those left."""
    ratio = NewTokenRatio(1.0)
    ratio.after_retract([(5, 50), (3, 20)])
    assert ratio.current == pytest.approx((8 + 40) / 71)
    ratio.after_retract([(5, 10)])
    assert ratio.current == 1.0


# A (prompt 10, output 50) and C (prompt 10, output 5) at 0, B (prompt 10, output 50) at 1,
# pages of 1 token, 110 of them.
# Step 0: A: 10 + 50 + 1 = 61 < 110, admitted (reserves 1 + 50); C: 16 < 100 - 51, admitted.
# Step 1: free 90; A reserves (50 - 1) x 0.7 = 34.3, C (5 - 1) x 0.7 = 2.8: 61 < 52.9 fails,
#   the batch is full. Steps 2-4 decode without a round (the latch). C finishes at step 4.
# Step 5: the running batch drops C before the round, which clears the latch; free 96, A
#   reserves (50 - 5) x (0.7 - 4 x 0.602/600) = 31.32: 61 < 64.68, B is admitted.
#   (SGLang 0.5.23 did the same, recorded with conformance/sglang_loop_driver.py --scenario.)
LATCH = [Request("A", 0, 10, 50), Request("C", 0, 10, 5), Request("B", 1, 10, 50)]


def test_admission_reserves_future_decode_tokens_and_waits_on_a_full_batch():
    """B waits for C to leave the batch (the latch), and is admitted in the next step."""
    result = simulate(LATCH, engine_config("sglang", block_size=1, num_blocks=110))
    assert admission_steps(result) == {"A": 0, "C": 0, "B": 5}


def test_schedule_conservativeness_scales_the_reservation():
    """At 0.1 the ratio starts at 0.07: step 1 reserves 49 x 0.07 + 4 x 0.07 = 3.71, and
    61 < 90 - 3.71 admits B at once; the lesson's block check admits it at once too."""
    config = engine_config("sglang", block_size=1, num_blocks=110, schedule_conservativeness=0.1)
    assert admission_steps(simulate(LATCH, config))["B"] == 1
    lesson = engine_config("lesson", block_size=1, num_blocks=110, watermark=0.0)
    assert admission_steps(simulate(LATCH, lesson))["B"] == 1


def test_a_prompt_that_cannot_fit_with_its_output_can_never_run():
    """prompt + min(output, 4096) + a page must be below the pool: 60 + 40 + 1 >= 100."""
    result = simulate([Request("big", 0, 60, 40)],
                      engine_config("sglang", block_size=1, num_blocks=100))
    assert result.requests[0].status == "starved"
    assert "needs 101 KV tokens" in result.requests[0].reason


def test_max_prefill_tokens_without_chunking_lets_only_the_first_exceed_it():
    """chunked_prefill_size -1, max_prefill_tokens 100: 60 then 30 (30 < 40 left), and 50
    (>= 10 left) waits for the next step; 150 alone runs (the first of a step may exceed)."""
    config = engine_config("sglang", chunked_prefill_size=-1, max_num_batched_tokens=4096,
                           max_prefill_tokens=100, block_size=1, num_blocks=2000)
    requests = [Request("a", 0, 60, 3), Request("b", 0, 30, 3), Request("c", 0, 50, 3)]
    assert admission_steps(simulate(requests, config)) == {"a": 0, "b": 0, "c": 1}
    alone = simulate([Request("x", 0, 150, 3), Request("y", 0, 5, 3)], config)
    assert admission_steps(alone) == {"x": 0, "y": 1}


def test_a_new_chunk_is_a_whole_number_of_pages():
    """Pages of 16, chunk size 64: a 40-token prompt is charged 48, leaving 16, so the next
    40-token prompt starts with a 16-token chunk (kvsched's plain budget would give 24)."""
    config = engine_config("sglang", max_num_batched_tokens=64, block_size=16, num_blocks=400)
    result = simulate([Request("a", 0, 40, 2), Request("b", 0, 40, 2)], config)
    assert admits(result) == {"a": "prefill 40 tokens", "b": "prefill 40 tokens, first chunk 16"}
    plain = engine_config("sglang", max_num_batched_tokens=64, block_size=16, num_blocks=400,
                          admission_rule="blocks")
    assert admits(simulate([Request("a", 0, 40, 2), Request("b", 0, 40, 2)], plain))["b"] == (
        "prefill 40 tokens, first chunk 24")


def test_retraction_frees_the_fewest_generated_and_it_recomputes_its_tokens():
    """Pages of 1, 100 of them, conservativeness 0.05 (ratio 0.035, so both are admitted).
    x decodes alone at steps 1-4; y (admitted at 5: 61 < 76 - 35 x 0.0348) and x then take a
    page each per pass: 56 free pages last to step 33. At step 34 x needs one: y, with 29
    tokens to x's 33, is retracted, freeing 20 + 28 pages. Its re-prefill (20 + 29 tokens,
    plus 11 to go and a page) does not fit beside x until x finishes at step 40. (The pages
    counted without the radix cache; with it, y's prompt stays in the tree, its decoded
    tokens do not: its recompute finds the 20 prompt tokens cached.)"""
    requests = [Request("x", 0, 20, 40), Request("y", 5, 20, 40)]
    for caching, again in ((False, "recompute 49 tokens"),
                           (True, "recompute 49 tokens, 20 cached")):
        config = engine_config("sglang", block_size=1, num_blocks=100,
                               schedule_conservativeness=0.05, enable_prefix_caching=caching)
        result = simulate(requests, config)
        events = [(step, rid, kind, detail) for step, _t, rid, kind, detail in result.events
                  if kind in ("admit", "preempt")]
        assert events == [(0, "x", "admit", "prefill 20 tokens"),
                          (5, "y", "admit", "prefill 20 tokens"),
                          (34, "y", "preempt", "recompute; 48 blocks freed for x"),
                          (41, "y", "admit", again)]


def test_chunked_prefill_size_is_sglangs_spelling_of_the_chunk_budget():
    """chunked_prefill_size: N = chunking with an N-token budget; -1 = no chunking."""
    spec = EngineSpec.model_validate({"preset": "sglang", "chunked_prefill_size": 4096})
    assert (spec.chunked_prefill, spec.max_num_batched_tokens) == (True, 4096)
    assert not EngineSpec.model_validate({"chunked_prefill_size": -1}).chunked_prefill
    with pytest.raises(ValueError, match="disagree"):
        EngineSpec.model_validate({"chunked_prefill_size": 64, "max_num_batched_tokens": 32})
    with pytest.raises(ValueError, match="positive token count or -1"):
        EngineSpec.model_validate({"chunked_prefill_size": 0})
    with pytest.raises(ValueError, match="running_loop"):
        engine_config("vllm_v1", admission_rule="future_tokens")


def test_random_policy_is_seeded_and_reproducible():
    """The same seed gives the same order, another seed another one; every request runs."""
    requests = [Request(f"r{i}", 0, 8, 2) for i in range(8)]
    config = engine_config("sglang", max_num_seqs=1)

    def order(seed: int) -> list[str]:
        result = simulate(requests, config, make_policy("random", seed=seed))
        return [r.request_id for r in sorted(result.requests, key=lambda r: r.finish_time)]

    assert order(1) == order(1)
    assert sorted(order(1)) == sorted(r.request_id for r in requests)
    assert len({tuple(order(seed)) for seed in range(4)}) > 1


def test_a_bad_sglang_key_is_one_line_and_exit_2(tmp_path):
    """schedule_conservativeness must be > 0: one line naming the field, exit code 2."""
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nengine: {preset: sglang, schedule_conservativeness: 0}\n"
                    "workload: {kind: inline, requests: [{id: a, prompt_len: 4, output_len: 2}]}\n")
    out = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out")])
    assert out.exit_code == 2
    assert len(out.output.strip().splitlines()) == 1
    assert "schedule_conservativeness" in out.output


# lo (priority 20) at 0 and hi (priority 0) at 1, prompts 10 and outputs 60, 100 pages of 1
# (no prefix cache: the pages as counted here).
# Step 1 on: hi needs 10 + 60 + 1 = 71 < 90 - k - (60 - k) x ratio: never while lo runs. With
#   priority preemption SGLang 0.5.23 clears the batch-full latch at the start of every round
#   (scheduler.py line 4090) and only a full set of request slots sets it before
#   `preempt_to_schedule` (line 4235); a KV shortage is NO_TOKEN, which ends the round (line
#   4282). So hi waits for lo to finish (step 59) and is admitted at the next round.
PRIORITY = [Request("lo", 0, 10, 60, priority=20), Request("hi", 1, 10, 60, priority=0)]


def test_priority_scheduling_does_not_preempt_for_a_kv_shortage():
    """enable_priority_scheduling with free request slots: hi, short of KV, waits for lo."""
    config = engine_config("sglang", block_size=1, num_blocks=100,
                           enable_priority_scheduling=True, enable_prefix_caching=False)
    result = simulate(PRIORITY, config, make_policy("priority"))
    events = [(step, rid, kind, detail) for step, _t, rid, kind, detail in result.events
              if kind in ("admit", "preempt")]
    assert events == [(0, "lo", "admit", "prefill 10 tokens"),
                      (60, "hi", "admit", "prefill 10 tokens")]


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_the_head_that_preempts_is_admitted_even_when_its_victim_requeues_ahead(mode):
    """One request slot, victims requeued at the front: hi preempts lo at step 1 and is
    admitted in the same round (SGLang adds the request right after `preempt_to_schedule`;
    lo rejoins the queue after the round); lo resumes once hi is done."""
    config = engine_config("sglang", block_size=1, num_blocks=100, max_num_seqs=1,
                           preemption=mode, requeue="front", enable_priority_scheduling=True,
                           enable_prefix_caching=False)
    result = simulate(PRIORITY, config, make_policy("priority"))
    resume = "swap_in" if mode == "swap" else "admit"
    events = [(step, rid, kind) for step, _t, rid, kind, _d in result.events
              if kind in ("admit", "preempt", "swap_in", "finish")]
    assert events == [(0, "lo", "admit"), (1, "lo", "preempt"), (1, "hi", "admit"),
                      (60, "hi", "finish"), (61, "lo", resume), (119, "lo", "finish")]


def test_priority_preemption_needs_a_gap_over_the_threshold():
    """A gap of 20 is not over a threshold of 20; without the flag nothing is preempted."""
    for keys in ({"enable_priority_scheduling": True,
                  "priority_scheduling_preemption_threshold": 20}, {}):
        config = engine_config("sglang", block_size=1, num_blocks=100, **keys)
        result = simulate(PRIORITY, config, make_policy("priority"))
        assert result.summary["num_preemptions"] == 0
        assert admission_steps(result) == {"lo": 0, "hi": 60}
    with pytest.raises(ValueError, match="future_tokens"):
        engine_config("vllm_v0", enable_priority_scheduling=True)


def test_a_spent_chunk_budget_admits_nothing_rather_than_a_negative_chunk():
    """Pages of 16, chunk budget 40: a's first chunk is 32 (two pages); at step 1 its 40-token
    chunk is charged 48 (-8 left), so b waits; at step 2 a's last 28 are charged 32, and b
    (10 tokens, a 16-token page) does not fit the 8 left either: it starts at step 3."""
    config = engine_config("sglang", max_num_batched_tokens=40, block_size=16, num_blocks=200)
    result = simulate([Request("a", 0, 100, 3), Request("b", 1, 10, 3)], config,
                      record_batches=True)
    sizes = [(step, rid, n) for step, _t, rid, kind, n in result.batches if kind == "prefill"]
    assert sizes == [(0, "a", 32), (1, "a", 40), (2, "a", 28), (3, "b", 10)]
    assert all(r.status == "finished" for r in result.requests)
