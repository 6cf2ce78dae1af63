"""Hand-checked scheduler rules (issue 2, "Step semantics"), one test per rule.

Every workload is tiny and every expected number below was worked out by hand from the spec,
step by step (the comments show the working); nothing is computed by running the engine twice.
Block arithmetic: a request holding `b` blocks can decode while prompt + generated <= b *
block_size (the cache holds prompt + generated - 1 tokens, plus the token being decoded).
"""

from __future__ import annotations

import re

import pytest

from kvsched import (
    BATCH_COLUMNS,
    STEP_COLUMNS,
    ConstantStep,
    EngineConfig,
    LinearStep,
    Request,
    RunResult,
    make_policy,
    simulate,
)


def run(requests, policy=None, time_model=None, **config) -> RunResult:
    return simulate(requests, EngineConfig(**config), policy, time_model, record_batches=True)


def rec(result: RunResult, request_id: str):
    (record,) = [r for r in result.requests if r.request_id == request_id]
    return record


def rows(result: RunResult) -> list[dict]:
    return [dict(zip(STEP_COLUMNS, row, strict=True)) for row in result.steps]


def row(result: RunResult, step: int) -> dict:
    (found,) = [r for r in rows(result) if r["step"] == step]
    return found


def column(result: RunResult, name: str) -> list:
    return [r[name] for r in rows(result)]


def events(result: RunResult, kind: str | None = None) -> list[tuple]:
    """(step, time, request_id, event) of every event, or of one kind."""
    return [e[:4] for e in result.events if kind is None or e[3] == kind]


# -- time to first token and the clock --------------------------------------------------


def test_ttft_is_one_step_when_admitted_on_arrival():
    """A request admitted on its arrival step gets its first token at the end of that step."""
    result = run([Request("a", 0, 10, 3)])
    a = rec(result, "a")
    # step 0 prefill -> token 1 at t=1; steps 1, 2 decode -> tokens 2, 3; finish at t=3.
    assert (a.status, a.ttft, a.ttft_steps, a.first_token_time) == ("finished", 1.0, 1, 1.0)
    assert (a.first_scheduled_time, a.queue_time, a.finish_time, a.e2e_latency) == (0, 0, 3, 3)
    assert a.generated_tokens == 3
    assert a.max_token_gap == 1.0
    assert column(result, "step") == [0, 1, 2]
    assert column(result, "prefill_tokens") == [10, 0, 0]
    assert column(result, "decode_tokens") == [0, 1, 1]
    assert events(result) == [(0, 0, "a", "arrive"), (0, 0, "a", "admit"),
                              (2, 3, "a", "finish")]


def test_fractional_arrival_joins_at_next_whole_step():
    """Arriving at 0.5 while busy, a request joins the queue at step 1 (time 1), not at 0.5."""
    result = run([Request("a", 0, 10, 3), Request("b", 0.5, 10, 1)])
    b = rec(result, "b")
    # b joins at step 1, is admitted there, first token at t=2: ttft 1.5, i.e. 1 step.
    assert b.first_scheduled_time == 1.0
    assert b.queue_time == 0.5
    assert b.first_token_time == 2.0
    assert b.ttft == 1.5
    assert b.ttft_steps == 1
    assert row(result, 0)["num_running"] == 1  # b is not there in step 0
    assert row(result, 1)["num_admitted"] == 1
    assert (1, 0.5, "b", "arrive") in events(result)  # step 1, stamped with its arrival time


def test_idle_clock_jumps_to_next_whole_step_after_arrival():
    """With nothing to do, the step clock jumps to the first whole step at or after the next
    arrival; the skipped steps are not recorded."""
    result = run([Request("a", 0, 10, 2), Request("b", 7.2, 10, 2)])
    # a: steps 0, 1 (finish t=2). Idle, next arrival 7.2 -> step 8 at t=8.
    assert column(result, "step") == [0, 1, 8, 9]
    assert column(result, "time") == [0.0, 1.0, 8.0, 9.0]
    b = rec(result, "b")
    assert (b.first_scheduled_time, b.first_token_time, b.finish_time) == (8.0, 9.0, 10.0)
    assert b.ttft == pytest.approx(1.8)
    assert b.ttft_steps == 1
    assert result.summary["num_steps"] == 4


# -- decode first, budgets ---------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "admit_step"), [(9, 1), (10, 5)])
def test_decodes_consume_budget_before_a_prefill_is_admitted(prompt, admit_step):
    """Running decodes take budget first; a prefill that no longer fits the leftover waits."""
    # Budget 10. a (8 tokens) prefills in step 0, then decodes in steps 1-4 (1 token each).
    # In step 1 the leftover is 9: a 9-token prompt fits, a 10-token prompt waits until a has
    # finished (end of step 4) and is admitted in step 5.
    result = run([Request("a", 0, 8, 5), Request("b", 1, prompt, 1)],
                 max_num_batched_tokens=10, watermark=0)
    b = rec(result, "b")
    assert b.first_scheduled_time == admit_step
    assert b.ttft == admit_step  # first token at admit_step + 1, arrival at 1
    assert b.ttft_steps == admit_step
    step1 = row(result, 1)
    assert step1["decode_tokens"] == 1
    if admit_step == 1:
        assert (step1["prefill_tokens"], step1["budget_used"], step1["num_waiting"]) == (9, 10, 0)
    else:
        assert (step1["prefill_tokens"], step1["budget_used"], step1["num_waiting"]) == (0, 1, 1)
    assert rec(result, "a").finish_time == 5


def test_decodes_stop_when_budget_runs_out_in_admission_order():
    """Decodes run in admission order and stop when the budget is spent; the rest stall."""
    # mix_prefill_decode=False lets four requests run under a budget of 2:
    # step 0 prefills a, b; step 1 prefills c, d (no decode); steps 2, 3 decode a, b only
    # (budget 2), a and b finish at t=4; step 4 decodes c, d, which finish at t=5.
    requests = [Request("a", 0, 1, 3), Request("b", 0, 1, 3), Request("c", 1, 1, 2),
                Request("d", 1, 1, 2)]
    result = run(requests, max_num_batched_tokens=2, mix_prefill_decode=False)
    assert column(result, "prefill_tokens") == [2, 2, 0, 0, 0]
    assert column(result, "decode_tokens") == [0, 0, 2, 2, 2]
    assert column(result, "num_running") == [2, 4, 4, 4, 2]
    assert [rec(result, i).finish_time for i in "abcd"] == [4, 4, 5, 5]
    assert rec(result, "a").max_token_gap == 2  # tokens at t=1, 3, 4
    assert rec(result, "c").max_token_gap == 3  # tokens at t=2, 5
    assert [r[2:] for r in result.batches if r[0] == 2] == [("a", "decode", 1),
                                                            ("b", "decode", 1)]


@pytest.mark.parametrize(("policy", "ttft_b", "ttft_c"), [("fcfs", 3, 4), ("spf", 3, 1)])
def test_head_of_line_blocking(policy, ttft_b, ttft_c):
    """Under fcfs a head that does not fit blocks a small request behind it; spf lets it pass."""
    # Budget 10. a (8 tokens, 3 out) runs steps 0-2, leaving 9 tokens in steps 1 and 2.
    # b (10 tokens) cannot fit until step 3.
    # fcfs: b blocks c; b is admitted in step 3 (budget 0 left), c in step 4 -> ttft 4.
    # spf: c (3 tokens) is ordered first and fits next to a's decode in step 1 -> ttft 1.
    requests = [Request("a", 0, 8, 3), Request("b", 1, 10, 1), Request("c", 1, 3, 1)]
    result = run(requests, make_policy(policy), max_num_batched_tokens=10, watermark=0)
    assert rec(result, "b").ttft == ttft_b
    assert rec(result, "c").ttft == ttft_c
    assert all(r.status == "finished" for r in result.requests)


def test_max_num_seqs_caps_running_requests():
    """No more than max_num_seqs requests run; the next one waits for a slot."""
    result = run([Request(f"r{i}", 0, 4, 3) for i in range(3)], max_num_seqs=2)
    # r0, r1 run steps 0-2 (finish t=3); r2 is admitted in step 3, finishes t=6.
    assert column(result, "num_running") == [2, 2, 2, 1, 1, 1]
    assert column(result, "num_waiting") == [1, 1, 1, 0, 0, 0]
    r2 = rec(result, "r2")
    assert (r2.first_scheduled_time, r2.ttft, r2.ttft_steps, r2.finish_time) == (3, 4, 4, 6)


# -- KV blocks: watermark, preemption ----------------------------------------------------


def test_watermark_applies_to_admission_not_to_decode_growth():
    """Admission keeps floor(watermark * num_blocks) blocks free; decode growth may use them."""
    # 10 blocks of 4 tokens, watermark 0.25 -> floor(2.5) = 2 blocks kept free at admission.
    # step 0: a (20 tokens, 5 blocks): free 5; b (12 tokens, 3 blocks): 5 - 3 = 2 >= 2, free 2;
    #         c (4 tokens, 1 block): 2 - 1 = 1 < 2 -> waits.
    # step 1: a needs a 6th block (21 tokens), b a 4th (13): both take one below the watermark.
    #         c still cannot be admitted. a, b finish (2 tokens) at t=2.
    # step 2: c is admitted, first token at t=3.
    requests = [Request("a", 0, 20, 2), Request("b", 0, 12, 2), Request("c", 0, 4, 1)]
    result = run(requests, block_size=4, num_blocks=10, watermark=0.25)
    step0, step1 = row(result, 0), row(result, 1)
    assert (step0["num_admitted"], step0["blocks_used"], step0["blocks_free"]) == (2, 8, 2)
    assert (step1["num_admitted"], step1["blocks_used"], step1["blocks_free"]) == (0, 10, 0)
    assert step1["num_preempted"] == 0
    c = rec(result, "c")
    assert (c.first_scheduled_time, c.ttft) == (2, 3)
    assert result.summary["num_preemptions"] == 0
    assert result.summary["peak_blocks_used"] == 10


# Shared by the preemption tests: 4 blocks of 4 tokens, no watermark. a and b (8-token
# prompts, 2 blocks each) fill the pool in step 0; c (4 tokens, 1 block) waits.
# step 1: a's decode needs a 3rd block (9 tokens), none is free: the victim is b, the most
#         recently admitted; b frees 2 blocks, a takes 1, 1 is left free.
PREEMPT_WORKLOAD = [Request("a", 0, 8, 3), Request("b", 0, 8, 3), Request("c", 0, 4, 1)]
PREEMPT_ENGINE = dict(block_size=4, num_blocks=4, watermark=0, max_num_batched_tokens=100)


def test_recompute_preemption_victim_goes_to_front_and_recomputes():
    """The most recently admitted request is preempted, re-enters ahead of never-started
    requests, and is re-prefilled with prompt + generated tokens counted as recomputed."""
    result = run(PREEMPT_WORKLOAD, **PREEMPT_ENGINE)
    # step 1: b (needs 8 + 1 = 9 tokens, 3 blocks) heads the queue; only 1 block is free, so
    #         b waits and c, which would fit in that block, waits behind it.
    # step 2: a decodes (9 -> 10 tokens fit in 3 blocks), finishes at t=3, frees 3 blocks.
    # step 3: b recomputes 9 tokens (3 blocks), c prefills 4 (1 block); c finishes at t=4.
    # step 4: b decodes its 3rd token, finishes at t=5.
    step1 = row(result, 1)
    assert (step1["num_preempted"], step1["decode_tokens"], step1["num_admitted"]) == (1, 1, 0)
    assert (step1["blocks_used"], step1["blocks_free"], step1["num_waiting"]) == (3, 1, 2)
    step3 = row(result, 3)
    assert (step3["recomputed_tokens"], step3["prefill_tokens"], step3["budget_used"]) == (9, 4, 13)
    assert (step3["blocks_used"], step3["blocks_free"]) == (4, 0)
    a, b, c = (rec(result, i) for i in "abc")
    assert (a.num_preemptions, a.finish_time) == (0, 3)
    assert (b.num_preemptions, b.num_recomputed_tokens, b.generated_tokens) == (1, 9, 3)
    assert (b.first_token_time, b.finish_time, b.max_token_gap) == (1, 5, 3)
    assert (c.first_scheduled_time, c.ttft, c.ttft_steps) == (3, 4, 4)
    assert events(result, "preempt") == [(1, 1.0, "b", "preempt")]
    assert [e[2] for e in events(result, "admit")] == ["a", "b", "b", "c"]
    assert result.summary["recomputed_tokens"] == 9
    assert result.summary["generated_tokens"] == 7
    assert result.summary["recompute_ratio"] == pytest.approx(9 / 7)


def test_requeue_back_lets_never_started_requests_pass():
    """With requeue=back the victim re-enters by policy order as if just arrived (behind c)."""
    result = run(PREEMPT_WORKLOAD, requeue="back", **PREEMPT_ENGINE)
    # step 1: after the preemption c (arrived at 0) is ahead of b (re-entered at 1) and takes
    #         the free block: c finishes at t=2. step 2: a finishes at t=3. step 3: b
    #         recomputes 9 tokens; step 4: b finishes at t=5.
    step1 = row(result, 1)
    assert (step1["num_preempted"], step1["num_admitted"], step1["prefill_tokens"]) == (1, 1, 4)
    assert (step1["blocks_used"], step1["blocks_free"]) == (4, 0)
    c, b = rec(result, "c"), rec(result, "b")
    assert (c.first_scheduled_time, c.ttft) == (1, 2)
    assert (b.num_recomputed_tokens, b.finish_time) == (9, 5)


def test_admit_after_preempt_false_skips_admission_in_a_preempting_step():
    """admit_after_preempt=False: no admission in a step that preempted (c waits a step)."""
    result = run(PREEMPT_WORKLOAD, requeue="back", admit_after_preempt=False, **PREEMPT_ENGINE)
    # As with requeue=back, but step 1 admits nothing: c is admitted in step 2 (1 free block).
    # a and c finish at t=3; b recomputes in step 3 and finishes at t=5.
    assert row(result, 1)["num_admitted"] == 0
    assert row(result, 1)["num_preempted"] == 1
    assert row(result, 2)["num_admitted"] == 1
    c, b = rec(result, "c"), rec(result, "b")
    assert (c.first_scheduled_time, c.ttft) == (2, 3)
    assert (b.num_recomputed_tokens, b.finish_time) == (9, 5)


def test_self_victim_is_preempted_and_skipped():
    """When the request needing a block is itself the most recently admitted, it is the victim:
    it is preempted and skipped, and the older request keeps running."""
    # 3 blocks of 4 tokens. a (6 tokens, 2 blocks) never needs a 3rd block for 3 tokens
    # (6 + 2 = 8). b (4 tokens, 1 block) needs a 2nd block in step 1 (5 tokens), none is free.
    # step 1: b preempts itself (frees 1 block; needs 2 to recompute 5 tokens: waits).
    # step 2: a finishes at t=3. step 3: b recomputes 5 tokens; step 4: b finishes at t=5.
    result = run([Request("a", 0, 6, 3), Request("b", 0, 4, 3)],
                 block_size=4, num_blocks=3, watermark=0)
    step1 = row(result, 1)
    assert (step1["num_preempted"], step1["decode_tokens"]) == (1, 1)
    assert (step1["blocks_used"], step1["blocks_free"]) == (2, 1)
    a, b = rec(result, "a"), rec(result, "b")
    assert (a.num_preemptions, a.finish_time, a.max_token_gap) == (0, 3, 1)
    assert (b.num_preemptions, b.num_recomputed_tokens, b.finish_time) == (1, 5, 5)
    assert events(result, "preempt") == [(1, 1.0, "b", "preempt")]
    assert row(result, 3)["recomputed_tokens"] == 5


def test_preempted_requests_reenter_newest_first_ahead_of_fresh_ones():
    """Two victims in one step re-enter most recently preempted first, both ahead of a request
    that arrived before either was preempted but never started."""
    # 5 blocks of 4 tokens. step 0 admits a (8 tokens, 2 blocks), b (8, 2), c (4, 1): pool full;
    # d (4 tokens) waits. step 1: a needs a block -> victim c (last admitted, frees 1); then b
    # needs a block -> victim b itself (frees 2). Queue: b, c, d.
    # step 2: a finishes (t=3). step 3: b recomputes 9 tokens (3 blocks), c 5 tokens (2 blocks),
    # d does not fit; c finishes (t=4). step 4: d admitted (t=5); b finishes (t=5).
    requests = [Request("a", 0, 8, 3), Request("b", 0, 8, 3), Request("c", 0, 4, 2),
                Request("d", 0, 4, 1)]
    result = run(requests, block_size=4, num_blocks=5, watermark=0)
    assert events(result, "preempt") == [(1, 1.0, "c", "preempt"), (1, 1.0, "b", "preempt")]
    assert [(e[0], e[2]) for e in events(result, "admit")] == [
        (0, "a"), (0, "b"), (0, "c"), (3, "b"), (3, "c"), (4, "d")]
    assert row(result, 3)["recomputed_tokens"] == 9 + 5
    d = rec(result, "d")
    assert (d.first_scheduled_time, d.ttft, d.num_preemptions) == (4, 5, 0)
    assert [rec(result, i).num_recomputed_tokens for i in "abcd"] == [0, 9, 5, 0]


def test_swap_preemption_accounting():
    """Swap mode moves the victim's blocks out and back: counted per step and per request; the
    swap-in costs 1 budget token, decodes in that step, and recomputes nothing."""
    result = run(PREEMPT_WORKLOAD, preemption="swap", **PREEMPT_ENGINE)
    # step 1: b's 2 blocks go to host. step 3 (a finished at t=3): b needs 3 blocks for
    # 8 + 1 + 1 tokens, 2 come back from host; b decodes (1 token); c prefills 4 tokens.
    step1, step3 = row(result, 1), row(result, 3)
    assert (step1["swapped_out_blocks"], step1["swapped_in_blocks"]) == (2, 0)
    assert (step3["swapped_out_blocks"], step3["swapped_in_blocks"]) == (0, 2)
    assert (step3["decode_tokens"], step3["prefill_tokens"], step3["recomputed_tokens"]) == (
        1, 4, 0)
    assert step3["budget_used"] == 5
    assert (step3["blocks_used"], step3["blocks_free"]) == (4, 0)
    assert sum(column(result, "swapped_out_blocks")) == 2
    assert sum(column(result, "swapped_in_blocks")) == 2
    b = rec(result, "b")
    assert (b.num_preemptions, b.num_swapped_blocks, b.num_recomputed_tokens) == (1, 4, 0)
    assert (b.generated_tokens, b.finish_time, b.max_token_gap) == (3, 5, 3)
    assert [e[:4] for e in result.events if e[3] in ("preempt", "swap_out", "swap_in")] == [
        (1, 1.0, "b", "preempt"), (1, 1.0, "b", "swap_out"), (3, 3.0, "b", "swap_in")]
    assert sorted(r[2:] for r in result.batches if r[0] == 3) == [
        ("b", "swap_in", 1), ("c", "prefill", 4)]
    assert result.summary["swapped_blocks"] == 4
    assert result.summary["recomputed_tokens"] == 0


# Victim choice: 6 blocks of 4 tokens. a (4 tokens, priority 3) arrives at 0 and holds 2
# blocks from step 1 (5 tokens); b (8 tokens, 2 blocks) and c (7 tokens, 2 blocks) arrive at
# 2 and fill the pool. In step 3 a has 3 tokens, b and c 1 each; b needs a 3rd block.
VICTIM_WORKLOAD = [Request("a", 0, 4, 10, priority=3), Request("b", 2, 8, 10),
                   Request("c", 2, 7, 10)]


@pytest.mark.parametrize(("victim", "expected"), [
    ("last_admitted", "c"),  # the tail of the running queue
    ("lowest_priority", "a"),  # the largest priority value, though it runs the longest
    ("fewest_generated", "b"),  # b and c have 1 token; b has the longer prompt (itself)
])
def test_victim_choice(victim, expected):
    """victim= picks the request to preempt when a decode needs a block and none is free."""
    result = run(VICTIM_WORKLOAD, victim=victim, block_size=4, num_blocks=6, watermark=0)
    assert row(result, 2)["blocks_used"] == 6
    first = events(result, "preempt")[0]
    assert first == (3, 3.0, expected, "preempt")
    step3 = row(result, 3)
    assert step3["num_preempted"] == 1
    # The victim's decode (done or not yet done in this pass) is not counted.
    assert step3["decode_tokens"] == 2
    assert all(r.status == "finished" for r in result.requests)


def test_lowest_priority_victim_already_decoded_is_undone():
    """A victim that had already decoded in this pass loses that token: it resumes from 3."""
    result = run(VICTIM_WORKLOAD, victim="lowest_priority", block_size=4, num_blocks=6,
                 watermark=0)
    # step 3: a (3 tokens) decoded first, then is preempted for b: its 4th token is undone.
    # It is re-prefilled later with 4 + 3 = 7 tokens (its first preemption).
    a = rec(result, "a")
    readmission = [e for e in result.events if e[2] == "a" and e[3] == "admit"][1]
    assert readmission[4] == "recompute 7 tokens"
    assert a.num_recomputed_tokens >= 7
    assert row(result, 3)["blocks_used"] == 5  # a's 2 freed, b took 1


# -- rule switches -------------------------------------------------------------------------


@pytest.mark.parametrize(("mix", "a_finish", "a_gap", "step1"), [
    (True, 3, 1, (4, 1)),
    (False, 4, 2, (4, 0)),
])
def test_mix_prefill_decode(mix, a_finish, a_gap, step1):
    """mix_prefill_decode=False: a step that prefills runs no decode (a stalls one step)."""
    # a runs from step 0; b (4 tokens) arrives at 1. Mixed: step 1 decodes a and prefills b.
    # Not mixed: step 1 only prefills b; a decodes in steps 2, 3 and finishes at t=4.
    result = run([Request("a", 0, 4, 3), Request("b", 1, 4, 2)], mix_prefill_decode=mix)
    assert (row(result, 1)["prefill_tokens"], row(result, 1)["decode_tokens"]) == step1
    a = rec(result, "a")
    assert (a.finish_time, a.max_token_gap) == (a_finish, a_gap)
    assert rec(result, "b").finish_time == 3


# -- starvation, unschedulable requests, limits -------------------------------------------


def test_prompt_over_budget_starves_and_blocks_fcfs_queue():
    """A prompt longer than the budget starves with a reason; under fcfs everyone behind it
    starves too, with a reason naming the head."""
    requests = [Request("a", 0, 20, 1), Request("b", 0, 5, 1), Request("c", 1, 5, 1)]
    result = run(requests, max_num_batched_tokens=16)
    assert [r.status for r in result.requests] == ["starved"] * 3
    a, b, c = (rec(result, i) for i in "abc")
    assert "20" in a.reason and "16" in a.reason
    assert re.search(r"\ba\b", b.reason) and re.search(r"\ba\b", c.reason)  # the head
    assert b.first_token_time is None and b.ttft is None
    assert sorted(e[2] for e in result.events if e[3] == "starve") == ["a", "b", "c"]
    assert {e[2]: e[4] for e in result.events if e[3] == "starve"}["a"] == a.reason
    assert result.steps == []  # nothing ever ran
    assert result.summary["num_starved"] == 3


def test_prompt_over_budget_lets_others_pass_under_spf():
    """Under spf the over-long prompt sits behind the short ones, which finish; it starves."""
    requests = [Request("a", 0, 20, 1), Request("b", 0, 5, 1), Request("c", 1, 5, 1)]
    result = run(requests, make_policy("spf"), max_num_batched_tokens=16)
    assert [r.status for r in result.requests] == ["starved", "finished", "finished"]
    assert "16" in rec(result, "a").reason
    assert (rec(result, "b").ttft, rec(result, "c").ttft) == (1, 1)


def test_prompt_over_budget_rejected_at_arrival():
    """on_unschedulable=reject turns the over-long prompt away at arrival; the rest run."""
    requests = [Request("a", 0, 20, 1), Request("b", 0, 5, 1), Request("c", 1, 5, 1)]
    result = run(requests, max_num_batched_tokens=16, on_unschedulable="reject")
    assert [r.status for r in result.requests] == ["rejected", "finished", "finished"]
    a = rec(result, "a")
    assert "16" in a.reason
    assert events(result, "reject") == [(0, 0, "a", "reject")]
    assert (rec(result, "b").ttft, rec(result, "c").ttft) == (1, 1)
    assert result.summary["num_rejected"] == 1


@pytest.mark.parametrize(("mode", "status"), [("starve", "starved"), ("reject", "rejected")])
def test_request_needing_more_blocks_than_pool_minus_watermark(mode, status):
    """A request whose whole life needs more blocks than num_blocks - watermark is reported as
    unschedulable; one that just fits runs to the end, growing into the watermark."""
    # 10 blocks of 4, watermark 0.1 -> 1 block: 9 usable = 36 tokens of KV.
    # x: 20 + 17 tokens, the last never cached: 36 tokens, 9 blocks -> runs (t=17).
    # y: 20 + 18 -> 37 tokens, 10 blocks -> can never run.
    requests = [Request("x", 0, 20, 17), Request("y", 0, 20, 18)]
    result = run(requests, block_size=4, num_blocks=10, watermark=0.1, on_unschedulable=mode)
    x, y = rec(result, "x"), rec(result, "y")
    assert (x.status, x.finish_time) == ("finished", 17)
    assert result.summary["peak_blocks_used"] == 9
    assert y.status == status
    assert "10" in y.reason and "9" in y.reason
    assert y.first_scheduled_time is None
    kind = "starve" if mode == "starve" else "reject"
    assert [e[2] for e in result.events if e[3] == kind] == ["y"]


def test_recompute_over_budget_starves_the_victim_and_those_behind():
    """A victim whose prompt + generated tokens outgrew the budget can never be re-admitted:
    it starves at the front of the queue, and blocks whoever arrives behind it."""
    # Budget 6, 4 blocks of 4. a (4 tokens) from step 0; b (5 tokens) fits next to a's decode
    # in step 1. Step 5: a needs its 3rd block (9 tokens): victim b with 4 tokens generated;
    # b would recompute 5 + 4 = 9 > 6 tokens. c arrives at 6 behind b. a finishes at t=10.
    requests = [Request("a", 0, 4, 10), Request("b", 1, 5, 10), Request("c", 6, 2, 1)]
    result = run(requests, block_size=4, num_blocks=4, watermark=0, max_num_batched_tokens=6)
    a, b, c = (rec(result, i) for i in "abc")
    assert (a.status, a.finish_time) == ("finished", 10)
    assert events(result, "preempt") == [(5, 5.0, "b", "preempt")]
    assert (b.status, b.generated_tokens, b.num_preemptions) == ("starved", 4, 1)
    assert "recompute" in b.reason and "9" in b.reason
    assert c.status == "starved" and re.search(r"\bb\b", c.reason)
    assert result.summary["final_blocks_used"] == 0


def test_max_steps_leaves_requests_unfinished():
    """max_steps stops the run; what is left is unfinished, mid-decode or still queued."""
    requests = [Request("a", 0, 4, 10), Request("b", 0, 4, 1)]
    result = run(requests, max_steps=3, max_num_seqs=1)
    assert result.summary["num_steps"] == 3
    a, b = rec(result, "a"), rec(result, "b")
    assert (a.status, a.generated_tokens, a.finish_time) == ("unfinished", 3, None)
    assert (b.status, b.generated_tokens, b.first_scheduled_time) == ("unfinished", 0, None)
    assert a.reason is None and b.reason is None
    assert result.summary["num_unfinished"] == 2
    assert result.summary["final_blocks_used"] == 1  # a's 4 + 2 tokens in one block of 16


# -- time models ----------------------------------------------------------------------------


def test_constant_step_times_in_seconds():
    """ConstantStep: times are seconds; an arrival waits for the next step start; idle jumps
    go straight to the arrival time; ttft_steps stays in steps."""
    requests = [Request("a", 0, 10, 3), Request("b", 0.7, 10, 1), Request("c", 5.3, 10, 1)]
    result = run(requests, time_model=ConstantStep(0.5))
    assert result.time_unit == "s"
    # Steps start at 0, 0.5, 1.0; b (0.7) joins at 1.0. Idle after t=1.5, c starts at 5.3.
    assert column(result, "step") == [0, 1, 2, 3]
    assert column(result, "time") == pytest.approx([0.0, 0.5, 1.0, 5.3])
    assert column(result, "duration") == [0.5] * 4
    a, b, c = (rec(result, i) for i in "abc")
    assert (a.ttft, a.ttft_steps, a.finish_time, a.e2e_latency) == (0.5, 1, 1.5, 1.5)
    assert b.ttft == pytest.approx(0.8)
    assert b.ttft_steps == 1
    assert b.first_scheduled_time == 1.0
    assert c.ttft == pytest.approx(0.5)
    assert c.first_token_time == pytest.approx(5.8)


def test_linear_step_duration_and_token_gap():
    """LinearStep prices prefill tokens and decodes; a decode sharing a step with a long
    prefill stalls, and its max_token_gap shows the stall."""
    model = LinearStep(base=0.01, per_prefill_token=0.001, per_decode=0.002)
    # step 0: a prefills 10 -> 0.01 + 0.010 = 0.020, ends 0.020.
    # step 1: a decodes -> 0.012, ends 0.032 (b arrives at 0.025, during the step).
    # step 2: a decodes + b prefills 1000 -> 0.01 + 1.0 + 0.002 = 1.012, ends 1.044.
    # step 3: a decodes -> 0.012, ends 1.056: a finishes.
    requests = [Request("a", 0, 10, 4), Request("b", 0.025, 1000, 1)]
    result = run(requests, time_model=model)
    assert column(result, "duration") == pytest.approx([0.020, 0.012, 1.012, 0.012])
    a, b = rec(result, "a"), rec(result, "b")
    assert a.max_token_gap == pytest.approx(1.012)
    assert a.finish_time == pytest.approx(1.056)
    assert (a.ttft, a.ttft_steps) == (pytest.approx(0.020), 1)
    assert b.ttft == pytest.approx(1.044 - 0.025)
    assert b.ttft_steps == 1
    alone = run([Request("a", 0, 10, 4)], time_model=model)
    assert rec(alone, "a").max_token_gap == pytest.approx(0.012)


def test_linear_step_kv_read_price():
    """per_kv_token prices the KV a decode attends over: prompt + tokens generated so far."""
    model = LinearStep(base=0.01, per_prefill_token=0.0, per_decode=0.0, per_kv_token=0.001)
    # step 1 decodes token 2 over 10 + 1 tokens; step 2 token 3 over 10 + 2.
    result = run([Request("a", 0, 10, 3)], time_model=model)
    assert column(result, "duration") == pytest.approx([0.01, 0.021, 0.022])


# -- chunked prefill ------------------------------------------------------------------------


def test_chunked_prefill_splits_a_long_prompt():
    """chunked_prefill: a prompt longer than the budget is split over steps; the first token
    comes when the last chunk completes."""
    result = run([Request("a", 0, 20, 2)], max_num_batched_tokens=8, chunked_prefill=True)
    # chunks 8, 8, 4 in steps 0-2: first token at t=3; step 3 decodes, finish t=4.
    assert column(result, "prefill_tokens") == [8, 8, 4, 0]
    assert column(result, "decode_tokens") == [0, 0, 0, 1]
    a = rec(result, "a")
    assert (a.status, a.first_scheduled_time, a.ttft, a.ttft_steps, a.finish_time) == (
        "finished", 0, 3, 3, 4)
    unchunked = run([Request("a", 0, 20, 2)], max_num_batched_tokens=8)
    assert rec(unchunked, "a").status == "starved"


def test_long_prefill_token_threshold_caps_chunks():
    """long_prefill_token_threshold caps one request's chunk; the leftover budget admits others."""
    requests = [Request("a", 0, 20, 2), Request("b", 0, 3, 1)]
    result = run(requests, max_num_batched_tokens=8, chunked_prefill=True,
                 long_prefill_token_threshold=5)
    # step 0: a's chunk is 5, b's 3 tokens use the rest (b finishes t=1); steps 1-3: a 5 each,
    # first token t=4; step 4 decodes, a finishes t=5.
    assert column(result, "prefill_tokens") == [8, 5, 5, 5, 0]
    assert sorted(r[2:] for r in result.batches if r[0] == 0) == [
        ("a", "prefill", 5), ("b", "prefill", 3)]
    assert (rec(result, "a").ttft, rec(result, "a").finish_time) == (4, 5)
    assert rec(result, "b").ttft == 1


# -- records --------------------------------------------------------------------------------


def test_record_batches_rows_for_one_step():
    """record_batches lists what each step ran: one row per request, with phase and tokens."""
    requests = [Request("a", 0, 4, 3), Request("b", 1, 6, 1)]
    result = run(requests)
    assert BATCH_COLUMNS == ("step", "time", "request_id", "phase", "num_tokens")
    assert sorted(r for r in result.batches if r[0] == 1) == [
        (1, 1.0, "a", "decode", 1), (1, 1.0, "b", "prefill", 6)]
    assert [r for r in result.batches if r[0] == 0] == [(0, 0.0, "a", "prefill", 4)]
    assert len(result.batches) == 4  # a: prefill + 2 decodes, b: prefill
    plain = simulate(requests, EngineConfig())
    assert plain.batches is None
    assert plain.steps == result.steps


# -- found while writing these tests: the engine disagrees with the spec ------------------


def test_chunked_decodes_run_in_admission_order():
    """Spec: running decodes first, in admission order, also when prefill was chunked."""
    # Budget 4, chunks of at most 2, 6 blocks of 4, swap. step 0 admits a (10 tokens, 3 blocks,
    # chunk 2) then b (2 tokens, 1 block), which gets its first token at once. a's chunks end
    # in step 4. b takes a 2nd block in step 3 (5 tokens): 1 block left free.
    # step 7: in admission order a decodes first and takes the free block (13 tokens > 12);
    # then b (2 + 7 = 9 > 8) needs one, none is free: the victim is b itself (last admitted),
    # which swaps out its 2 blocks, and later swaps 2 back in (needing 3 blocks then).
    requests = [Request("a", 0, 10, 5), Request("b", 0, 2, 10)]
    result = run(requests, max_num_batched_tokens=4, block_size=4, num_blocks=6, watermark=0,
                 chunked_prefill=True, long_prefill_token_threshold=2, preemption="swap")
    assert [e[2] for e in events(result, "admit")] == ["a", "b"]
    assert events(result, "preempt") == [(7, 7.0, "b", "preempt")]
    assert row(result, 7)["swapped_out_blocks"] == 2
    assert rec(result, "b").num_swapped_blocks == 2 + 2


def test_arrival_exactly_at_a_step_start_joins_that_step():
    """ConstantStep(0.1): step 8 starts at 0.8 s; a request arriving at 0.8 s joins step 8."""
    result = run([Request("a", 0, 4, 20), Request("b", 0.8, 4, 1)],
                 time_model=ConstantStep(0.1))
    assert [e[0] for e in events(result, "admit") if e[2] == "b"] == [8]
    assert rec(result, "b").ttft == pytest.approx(0.1)
