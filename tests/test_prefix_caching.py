"""Prefix caching wired into the engine: hits, their accounting, and the invariants.

The cache itself (kvsched.kvcache) has its own tests; these run whole engines with
`enable_prefix_caching` on, over random workloads whose requests share prefixes, under every
preset and knob, and check the records against the step-by-step path and against what a
cache could honestly hold.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import check_invariants, clocks, configs, policies
from test_stretches import preset_configs

from kvsched import EngineConfig, Request, make_policy, simulate
from kvsched.engine import mechanism
from kvsched.kvcache.tracker import PrefixTracker, identity, make_tracker
from kvsched.prefix import Prefix, common_prefix
from kvsched.preset_engine import engine_config
from kvsched.sequence import Seq

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The queue policies, cache-aware ones (re-ranked every step from the cache) included.
all_policies = st.one_of(policies, st.builds(
    lambda name, aging: make_policy(name, aging=aging) if name == "lpm" else make_policy(name),
    st.sampled_from(["lpm", "dfs-weight", "hrrn"]), st.sampled_from([0.0, 0.0, 5.0])))


@st.composite
def shared_workloads(draw, max_requests: int = 12):
    """Requests drawing their first tokens from a few shared prefixes (some identical
    prompts, some a previous request's prompt + answer + more), long outputs included."""
    n = draw(st.integers(1, max_requests))
    roots = [(100 + g, draw(st.integers(1, 70))) for g in range(draw(st.integers(1, 3)))]
    requests: list[Request] = []
    for i in range(n):
        arrival = draw(st.integers(0, 200)) / draw(st.sampled_from([1, 4]))
        output = draw(st.integers(1, draw(st.sampled_from([8, 120]))))
        kind = draw(st.sampled_from(["group", "group", "private", "turn"]))
        earlier = [r for r in requests if r.prefix is not None]
        if kind == "turn" and earlier:
            # A conversation's next turn: the earlier prompt, its answer, new tokens.
            before = earlier[draw(st.integers(0, len(earlier) - 1))]
            assert before.prefix is not None
            extra = draw(st.integers(1, 30))
            prompt = before.prompt_len + before.output_len + extra
            segments = (*before.prefix.segments, (3000 + i, extra), (4000 + i, output))
        elif kind == "private":
            prompt, segments = draw(st.integers(1, 80)), ()
        else:  # a shared system prompt (cut short at random) and the request's own tokens
            root = roots[draw(st.integers(0, len(roots) - 1))]
            cut = draw(st.integers(1, root[1]))
            rest = draw(st.integers(0, 40))
            prompt = cut + rest
            segments = ((root[0], cut), *([(1000 + i, rest)] if rest else ()),
                        (2000 + i, output))
        prefix = Prefix(segments) if segments else None
        requests.append(Request(f"q{i}", arrival, prompt, output,
                                priority=draw(st.integers(0, 2)), prefix=prefix))
    requests.sort(key=lambda r: r.arrival_time)
    return requests


def caching(config: EngineConfig, accounting: str = "v1", cache: str = "hashed") -> EngineConfig:
    return dataclasses.replace(config, enable_prefix_caching=True, prefix_cache=cache,
                               prefix_accounting=accounting)  # type: ignore[arg-type]


caches = st.sampled_from(["hashed", "radix"])


def outcome(result):
    return (result.steps, result.events, [r.as_row() for r in result.requests],
            result.summary)


@settings(max_examples=250, **SETTINGS)
@given(shared_workloads(), preset_configs(), all_policies, clocks, caches)
def test_stretches_equal_the_exact_path_with_prefix_caching(requests, config, policy, clock,
                                                            cache):
    """Under every preset and knob, with either cache on, a stretch's records are the exact
    path's: cached and evicted blocks per step included."""
    accounting = "v0" if config.prefix_accounting.value == "v0" else "v1"
    config = caching(config, accounting, cache)
    fast = simulate(requests, config, policy, clock)
    exact = simulate(requests, config, policy, clock, stretches=False)
    assert outcome(fast) == outcome(exact)


@settings(max_examples=200, **SETTINGS)
@given(shared_workloads(), configs(), all_policies, clocks, st.sampled_from(["v1", "v0"]),
       caches)
def test_runs_with_prefix_caching_keep_every_invariant(requests, config, policy, clock,
                                                       accounting, cache):
    """No request lost, blocks counted the same way as without a cache, hits never more
    than the tokens earlier requests computed, and never more than the prompt."""
    config = caching(config, accounting, cache)
    result = simulate(requests, config, policy, clock)
    check_invariants(requests, config, result)
    records = {r.request_id: r for r in result.requests}
    order = {r.request_id: i for i, r in enumerate(requests)}
    for request in requests:
        record = records[request.request_id]
        if record.prefix_hit_tokens is None:
            assert record.first_scheduled_time is None and record.cached_tokens == 0
            continue
        assert 0 <= record.prefix_hit_tokens < request.prompt_len
        whole = accounting == "v0" and request.prompt_len % config.block_size == 0
        if whole and record.prefix_hit_tokens == request.prompt_len - 1:
            pass  # V0: all its blocks cached, it computes the last token again
        else:
            assert record.prefix_hit_tokens % config.block_size == 0
        assert record.cached_tokens >= record.prefix_hit_tokens
        # Only a request admitted before it (or at the same time) can have computed them.
        mine = identity(Seq.of(request, order[request.request_id], config.block_size))
        shared = max((common_prefix(mine.segments, identity(Seq.of(
                          other, order[other.request_id], config.block_size)).segments)
                      for other in requests if other is not request
                      and records[other.request_id].first_scheduled_time is not None
                      and records[other.request_id].first_scheduled_time
                      <= record.first_scheduled_time), default=0)
        assert record.prefix_hit_tokens <= shared
    if all(r.status == "finished" for r in result.requests):
        assert result.summary["final_blocks_used"] == 0  # nothing leaked


@settings(max_examples=150, **SETTINGS)
@given(shared_workloads(), configs(), policies, clocks, caches)
def test_the_cache_keeps_its_own_invariants_at_every_release(requests, config, policy, clock,
                                                             cache):
    """Every block free xor referenced, reference counts = holders, cached counts agree, and
    the scheduler's free count is the cache's, each time a request gives its blocks back."""
    config = caching(config, cache=cache)
    checked = []

    class Checked(PrefixTracker):  # (the compiled tracker's methods are overridden, not set)
        def release(self, seq, computed):
            super().release(seq, computed)
            self.cache.check()
            assert self.pool.free == self.cache.num_free
            checked.append(seq)

    def checked_tracker(config, pool):
        made = make_tracker(config, pool)
        return Checked(made.cache, pool) if made is not None else None

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mechanism, "make_tracker", checked_tracker)
        result = simulate(requests, config, policy, clock)
    finished = sum(r.status == "finished" for r in result.requests)
    assert len(checked) >= finished  # every finish went through a checked release


@settings(max_examples=150, **SETTINGS)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 60), st.integers(1, 30)),
                min_size=1, max_size=10), st.sampled_from(list(("lesson", "vllm_v1",
                                                                "vllm_v0", "sglang"))), caches)
def test_a_cache_with_nothing_shared_changes_nothing_but_the_cache_columns(specs, preset,
                                                                           cache):
    """Private prompts, a pool that never preempts: the hashed cache and the counting pool
    give the same records on every column the counting pool has."""
    requests = sorted((Request(f"q{i}", a, p, o) for i, (a, p, o) in enumerate(specs)),
                      key=lambda r: r.arrival_time)
    base = engine_config(preset, num_blocks=2000, block_size=4, enable_prefix_caching=False)
    plain = simulate(requests, base, make_policy("fcfs"))
    cached = simulate(requests, caching(base, cache=cache), make_policy("fcfs"))
    assert [row[:21] for row in plain.steps] == [row[:21] for row in cached.steps]
    assert plain.events == cached.events
    assert [r.as_row() for r in plain.requests] == [r.as_row() for r in cached.requests]
    assert all(r.prefix_hit_tokens == 0 for r in cached.requests)


def test_a_shared_system_prompt_is_computed_once():
    """Three requests share 64 tokens: the later two compute only their own tokens."""
    shared = Prefix(((1, 64),))
    requests = [Request("a", 0, 100, 5, prefix=shared), Request("b", 20, 100, 5, prefix=shared),
                Request("c", 40, 70, 5, prefix=shared)]
    for preset in ("lesson", "vllm_v1", "sglang"):
        config = engine_config(preset, num_blocks=200, block_size=16,
                               enable_prefix_caching=True)
        result = simulate(requests, config)
        hits = [(r.prefix_hit_tokens, r.cached_tokens) for r in result.requests]
        assert hits == [(0, 0), (64, 64), (64, 64)], preset
        assert result.summary["prefill_tokens"] == 100 + 36 + 6
        assert result.summary["prefill_tokens_saved"] == 128
        assert result.summary["prefix_hit_rate"] == 128 / 270
        # a's 6 full blocks, then b's 2 private ones (c's 74 tokens hold 4 shared blocks)
        assert result.steps[-1][21] == 8


def test_hits_are_whole_blocks_and_leave_the_last_token_to_compute():
    """An identical prompt of exactly 4 blocks hits 3: the last token is always computed."""
    prompt = Prefix(((7, 64),))
    requests = [Request("a", 0, 64, 3, prefix=prompt), Request("b", 10, 64, 3, prefix=prompt),
                Request("c", 20, 70, 3, prefix=Prefix(((7, 60),)))]
    config = engine_config("vllm_v1", num_blocks=100, block_size=16)
    hits = [r.prefix_hit_tokens for r in simulate(requests, config).requests]
    assert hits == [0, 48, 48]


def test_a_preempted_request_finds_its_own_blocks_on_resume():
    """vLLM V1 (caching on by default): a recompute preemption costs only what was evicted."""
    requests = [Request("a", 0, 40, 60), Request("b", 0, 40, 60)]
    config = engine_config("vllm_v1", num_blocks=9, block_size=16)
    cached = simulate(requests, config)
    plain = simulate(requests, engine_config("vllm_v1", num_blocks=9, block_size=16,
                                             enable_prefix_caching=False))
    assert plain.summary["num_preemptions"] >= 1
    assert cached.summary["num_preemptions"] >= 1
    assert cached.summary["recomputed_tokens"] < plain.summary["recomputed_tokens"]
    resumed = [r for r in cached.requests if r.num_preemptions]
    assert resumed and all(r.cached_tokens > 0 for r in resumed)
    assert all(r.prefix_hit_tokens == 0 for r in cached.requests)  # first admissions: cold


def test_eviction_takes_the_least_recently_freed_blocks_first():
    """A pool of 8 blocks: a's 4 prompt blocks stay cached after it finishes until b's
    private blocks need them; then c (a's prompt again) finds fewer."""
    a = Prefix(((1, 64),))
    requests = [Request("a", 0, 64, 1, prefix=a), Request("c0", 5, 65, 1, prefix=a),
                Request("b", 10, 112, 1), Request("c", 20, 65, 1, prefix=a)]
    config = engine_config("vllm_v1", num_blocks=9, block_size=16)  # 8 usable
    result = simulate(requests, config)
    hits = {r.request_id: r.prefix_hit_tokens for r in result.requests}
    assert hits["c0"] == 64
    assert hits["c"] < 64
    assert result.summary["evicted_blocks"] > 0
    assert sum(row[22] for row in result.steps) == result.summary["evicted_blocks"]


def test_prefix_caching_aware_prefills():
    """vLLM V0 case A19 (`tests/core/test_scheduler.py::test_prefix_caching_aware_prefills`):
    A, B and C share their first block; once A ran, B and C (8 tokens each, 4 cached) are
    prefilled together on a budget of 12, which without the cache fits only one of them."""
    shared = (1, 4)
    a = Request("A", 0, 8, 4, prefix=Prefix((shared, (2, 4))))
    b = Request("B", 2, 8, 4, prefix=Prefix((shared, (3, 4))))
    c = Request("C", 2, 8, 4, prefix=Prefix((shared, (4, 4))))
    keys = dict(num_blocks=16, block_size=4, max_num_batched_tokens=12, max_num_seqs=3,
                max_model_len=12, watermark=0.0)
    for caching, together in ((True, True), (False, False)):
        result = simulate([a, b, c], engine_config("vllm_v0", enable_prefix_caching=caching,
                                                   **keys))
        first = {r.request_id: r.first_scheduled_time for r in result.requests}
        assert (first["B"] == first["C"]) is together, caching
        hits = [r.prefix_hit_tokens for r in result.requests]
        assert hits == ([0, 4, 4] if caching else [0, 0, 0])


def test_a_fully_cached_prompt_cannot_ride_an_exhausted_budget():
    """vLLM V0 case A20: the admission loop stops once the budget is spent, so a prompt
    that is all cached still waits for the next step (V0 counts its 16 tokens cached, then
    charges it the last one again: 15 cached, 1 computed, never nothing)."""
    shared = Prefix(((1, 16),))
    warm = Request("warm", 0, 16, 2, prefix=shared)
    full = Request("full", 3, 16, 2)  # takes the whole budget of 16
    cached = Request("cached", 3, 16, 2, prefix=shared)  # all 16 cached, 1 computed again
    config = engine_config("vllm_v0", num_blocks=32, block_size=4, max_num_batched_tokens=16,
                           watermark=0.0, enable_prefix_caching=True)
    result = simulate([warm, full, cached], config)
    first = {r.request_id: r.first_scheduled_time for r in result.requests}
    hits = {r.request_id: r.prefix_hit_tokens for r in result.requests}
    assert hits["cached"] == 15
    assert first["cached"] > first["full"]


def test_lpm_serves_the_request_whose_prefix_is_cached_first():
    """Under lpm, of two requests waiting behind a busy engine, the one that finds 64 cached
    tokens is admitted before an older cold one (fcfs keeps arrival order)."""
    shared = Prefix(((1, 64),))
    requests = [Request("warm-up", 0, 65, 40, prefix=shared), Request("cold", 1, 70, 2),
                Request("hot", 2, 70, 2, prefix=shared)]
    config = engine_config("sglang", num_blocks=200, block_size=16, max_num_seqs=1)
    order = {}
    for name in ("fcfs", "lpm"):
        result = simulate(requests, config, make_policy(name))
        first = {r.request_id: r.first_scheduled_time for r in result.requests}
        order[name] = sorted(("cold", "hot"), key=first.__getitem__)
    assert order == {"fcfs": ["cold", "hot"], "lpm": ["hot", "cold"]}


def test_prefix_aware_routing_keeps_a_group_on_the_replica_that_caches_it():
    """Three groups on two replicas: round-robin spreads each group over both replicas
    (both compute its shared prompt), prefix-aware sends a group where it is cached."""
    import numpy as np

    from kvsched.cluster.replicas import ReplicaSetup, run_cluster
    from kvsched.routers import make_router
    from kvsched.timing import ConstantStep

    requests = [Request(f"g{g}-{i}", 4.0 * i + g, 300, 4, prefix=Prefix(((g, 256),)))
                for i in range(6) for g in range(3)]
    requests.sort(key=lambda r: r.arrival_time)
    config = engine_config("vllm_v1", num_blocks=400, block_size=16)
    rates = {}
    for name in ("round_robin", "prefix_aware"):
        result = run_cluster(requests, [ReplicaSetup(config, ConstantStep(0.05))] * 2,
                             [make_policy("fcfs")] * 2,
                             make_router(name, {}, 2, np.random.default_rng(0)))
        rates[name] = result.summary["prefix_hit_rate"]
        if name == "prefix_aware":
            homes = {}
            for request, replica in zip(result.requests, result.replica_of, strict=True):
                homes.setdefault(request.request_id.split("-")[0], set()).add(replica)
            assert all(len(where) == 1 for where in homes.values())
    assert rates["prefix_aware"] > rates["round_robin"]
