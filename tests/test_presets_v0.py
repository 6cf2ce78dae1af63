"""vLLM V0's partial prefills (vLLM 0.8.5 `PartialPrefillMetadata`), chunked V0 spelled
`{preset: vllm_v0, enable_chunked_prefill: true, step_order: decode_first}`; expected
numbers derived by hand from `from_queues`, `can_schedule` and `_chunk_new_tokens_to_schedule`."""

from __future__ import annotations

import pytest

from kvsched import Request, make_policy, simulate
from kvsched.preset_engine import engine_config

# L1 and L2 (300 tokens, long above 50) and S (20 tokens) at 0; budget 100, 2 partial
# prefills of which 1 long.
# Step 0: from_queues counts L1 (long), skips L2 (the long limit), counts S: 2 schedulable,
#   so a chunk is at most 100 // 2 = 50. L1 starts with 50; L2 is set aside (1 long under
#   way); S (20) passes it.
# Steps 1-3: only L1 is under way (1 schedulable: chunks up to 100). V0's running queue is
#   [L1, S] (new prefills in admission order): at step 1 L1 takes all 100 and S, behind it,
#   gets no token, which ends the walk; S leads the queue from step 2: S decodes, L1 takes
#   99, then its last 51 at step 3; L2 stays aside while L1 is long.
# Step 4: L1 decodes; L2 starts with 99, and has the whole budget once L1 ends (step 5).
# (Recorded with the real vLLM 0.8.5 V0 scheduler: conformance/vllm_v0_driver.py agrees.)
REQUESTS = [Request("L1", 0, 300, 3), Request("L2", 0, 300, 3), Request("S", 0, 20, 3)]


def v0_chunked(**keys):
    return engine_config("vllm_v0", enable_chunked_prefill=True, step_order="decode_first",
                         max_num_batched_tokens=100, num_blocks=400, **keys)


def chunks(result) -> list[tuple[int, str, int]]:
    return [(step, rid, n) for step, _t, rid, kind, n in result.batches if kind == "prefill"]


def test_short_prompts_pass_long_ones_and_chunks_share_the_budget():
    """max_num_partial_prefills 2, max_long_partial_prefills 1: S runs at step 0 beside L1."""
    config = v0_chunked(max_num_partial_prefills=2, max_long_partial_prefills=1,
                        long_prefill_token_threshold=50)
    result = simulate(REQUESTS, config, record_batches=True)
    assert chunks(result) == [(0, "L1", 50), (0, "S", 20), (1, "L1", 100), (2, "L1", 99),
                              (3, "L1", 51), (4, "L2", 99), (5, "L2", 99), (6, "L2", 100),
                              (7, "L2", 2)]
    starts = {r.request_id: r.first_scheduled_time for r in result.requests}
    assert starts == {"L1": 0, "L2": 4, "S": 0}


def test_one_partial_prefill_is_v0s_default_and_keeps_queue_order():
    """max_num_partial_prefills 1: L1 takes whole budgets, L2 then S follow in order."""
    result = simulate(REQUESTS, v0_chunked(), record_batches=True)
    starts = {r.request_id: r.first_scheduled_time for r in result.requests}
    assert starts == {"L1": 0, "L2": 3, "S": 6}


def test_two_long_prefills_may_run_together_when_allowed():
    """max_long_partial_prefills 2: L1 and L2 both start at step 0 with 50 each (3 would be
    schedulable, but at most 2), S waits for the budget."""
    config = v0_chunked(max_num_partial_prefills=2, max_long_partial_prefills=2,
                        long_prefill_token_threshold=50)
    result = simulate(REQUESTS, config, record_batches=True)
    assert chunks(result)[:2] == [(0, "L1", 50), (0, "L2", 50)]


def test_the_long_threshold_defaults_to_4_percent_of_max_model_len():
    """max_model_len 1000: threshold 40, so a 45-token prompt is long and a 35-token one not."""
    config = v0_chunked(max_num_partial_prefills=2, max_long_partial_prefills=1,
                        max_model_len=1000)
    requests = [Request("a", 0, 300, 3), Request("b", 0, 45, 3), Request("c", 0, 35, 3)]
    result = simulate(requests, config, record_batches=True)
    assert [(rid, n) for step, rid, n in chunks(result) if step == 0] == [("a", 50), ("c", 35)]


def test_partial_prefills_need_v0s_chunked_mode():
    """Refused with prefill-first steps, without chunking, or with more long than total."""
    with pytest.raises(ValueError, match="chunked mode"):
        engine_config("vllm_v0", enable_chunked_prefill=True, max_num_partial_prefills=2,
                      max_model_len=1000, step_order="prefill_first")
    with pytest.raises(ValueError, match="chunked mode"):
        engine_config("vllm_v0", max_num_partial_prefills=2, max_model_len=1000)
    with pytest.raises(ValueError, match="must be <="):
        v0_chunked(max_num_partial_prefills=2, max_long_partial_prefills=3, max_model_len=100)
    with pytest.raises(ValueError, match="4% of max_model_len"):
        v0_chunked(max_num_partial_prefills=2)


@pytest.mark.parametrize("policy", ["lpm", "hrrn"])
def test_a_cache_aware_queue_sets_long_prompts_aside_as_fcfs_does(policy):
    """Under a policy that re-ranks the queue every step (ties keep arrival order here: no
    cache, equal waits at 0), L2 is set aside and restored in its place as under FCFS."""
    config = v0_chunked(max_num_partial_prefills=2, max_long_partial_prefills=1,
                        long_prefill_token_threshold=50)
    fcfs = simulate(REQUESTS, config, record_batches=True)
    ranked = simulate(REQUESTS, config, make_policy(policy), record_batches=True)
    assert chunks(ranked) == chunks(fcfs)
    assert [r.as_row() for r in ranked.requests] == [r.as_row() for r in fcfs.requests]


def test_v0s_queue_walk_caches_a_block_in_the_pass_a_decode_fills_it():
    """With prefix caching, A's decodes fill a block while B's long prompt is prefilled in
    chunks (V0's one-queue walk): each step's cached blocks are A's alone (as without B,
    where the plain decode loop runs) plus all of B's 250 prompt blocks, which V0 hashes
    when it allocates them at B's admission (BlockTable.allocate promotes every full
    block), not chunk by chunk as V1 does."""
    from kvsched.prefix import Prefix

    config = engine_config("vllm_v0", enable_chunked_prefill=True, enable_prefix_caching=True,
                           block_size=4, max_num_batched_tokens=8, num_blocks=1000)
    a = Request("A", 0, 4, 9, prefix=Prefix(((100, 4), (200, 9))))
    alone = simulate([a], config)
    both = simulate([a, Request("B", 0.5, 1000, 2)], config)
    for step in range(1, 9):  # A decodes at steps 1-8, B is prefilled meanwhile
        assert both.steps[step][6] > 0, step  # B's chunk
        assert both.steps[step][21] == alone.steps[step][21] + 1000 // 4, step
    assert alone.steps[4][21] == 2  # A's second block filled at step 4


# vLLM 0.8.5's own test `test_no_multiple_partial_prefills_with_chunked_prefill_and_prefix_
# caching` (tests/core/test_chunked_prefill_scheduler.py), written with block ids: block size
# 2, budget 4; A and B the same 8 tokens, C shares A's first 4 then has 8 of its own.
V0_SHARED = {"kind": "inline", "hash_block_tokens": 2, "requests": [
    {"id": "A", "arrival": 0, "prompt_len": 8, "output_len": 5, "hash_ids": [0, 1, 2, 3]},
    {"id": "B", "arrival": 0.5, "prompt_len": 8, "output_len": 5, "hash_ids": [0, 1, 2, 3]},
    {"id": "C", "arrival": 1.5, "prompt_len": 12, "output_len": 5,
     "hash_ids": [0, 1, 20, 21, 22, 23]}]}


def v0_shared_prefix_run(tmp_path):
    from test_workload import requests_for

    config = engine_config("vllm_v0", enable_chunked_prefill=True, enable_prefix_caching=True,
                           step_order="decode_first", block_size=2, max_num_batched_tokens=4,
                           max_num_seqs=3, num_blocks=16, max_model_len=100)
    return simulate(requests_for(tmp_path, V0_SHARED), config, record_batches=True)


def test_v0_admits_no_prefill_beside_a_chunked_one_even_a_cached_one(tmp_path):
    """Steps 0-1: A is chunked 4 + 4; B, whose whole prompt A is caching, waits for it."""
    batches = v0_shared_prefix_run(tmp_path).batches
    assert [(s, rid, kind, n) for s, _t, rid, kind, n in batches if s < 2] == [
        (0, "A", "prefill", 4), (1, "A", "prefill", 4)]


def test_v0_fully_cached_prompt_computes_one_token(tmp_path):
    """Step 2: A decodes (1), B computes 1 token (7 cached), C 2 new tokens after its 4 cached
    (the 3 left rounded down to a block): vLLM's chunk sizes 1, 8 and 6."""
    result = v0_shared_prefix_run(tmp_path)
    step2 = {rid: n for s, _t, rid, _kind, n in result.batches if s == 2}
    assert step2 == {"A": 1, "B": 1, "C": 2}
    hits = {r.request_id: r.prefix_hit_tokens for r in result.requests}
    assert hits == {"A": 0, "B": 7, "C": 4}
