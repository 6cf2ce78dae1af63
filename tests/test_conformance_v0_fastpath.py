"""The `vllm_v0` preset's fast paths (bulk decode passes, decode stretches) decide exactly as
its step-by-step run does.

The conformance fixtures (tests/test_conformance_v0.py) record batches, which turns
stretches off; this checks the stretches against them on random V0 workloads: tight pools
(V0's free-block rule for appends), swap and recompute, priority sorting, chunking with
partial prefills.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvsched import ConstantStep, Request, make_policy, simulate
from kvsched.preset_engine import engine_config


@st.composite
def v0_runs(draw):
    block_size = draw(st.sampled_from([4, 8, 16]))
    chunked = draw(st.booleans())
    budget = draw(st.sampled_from([32, 64, 256]))
    one = -(-(budget // 2 + 40) // block_size)  # blocks of the longest request
    keys = {"block_size": block_size, "max_num_batched_tokens": budget,
            "max_num_seqs": draw(st.sampled_from([2, 4, 16])),
            "max_model_len": budget, "enable_chunked_prefill": chunked,
            # from one longest request (prompt + output) to a few: many full pools
            "num_blocks": draw(st.integers(one, 3 * one)),
            "preemption_mode": draw(st.sampled_from(["recompute", "swap"]))}
    policy = draw(st.sampled_from(["fcfs", "priority"]))
    if policy == "priority" and not chunked:
        keys["preemption_mode"] = "recompute"  # V0 crashes with swap there (RULES.md V0-5)
    if chunked and draw(st.booleans()):
        keys.update(max_num_partial_prefills=2, max_long_partial_prefills=1)
    n = draw(st.integers(2, 16))
    requests = [Request(f"q{i}", draw(st.integers(0, 6)), draw(st.integers(1, budget // 2)),
                        draw(st.integers(1, 40)), priority=draw(st.integers(0, 3)))
                for i in range(n)]
    return engine_config("vllm_v0", **keys), policy, requests


def _decisions(result):
    requests = [(r.request_id, r.status, r.first_token_time, r.finish_time,
                 r.num_preemptions, r.num_swapped_blocks) for r in result.requests]
    return requests, [e for e in result.events if e[3] != "warning"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v0_runs())
def test_stretches_decide_as_the_step_by_step_run(run):
    config, policy, requests = run
    fast = simulate(requests, config, make_policy(policy), ConstantStep(0.1))
    exact = simulate(requests, config, make_policy(policy), ConstantStep(0.1), stretches=False)
    assert _decisions(fast) == _decisions(exact)
