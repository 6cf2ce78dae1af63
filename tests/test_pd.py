"""Disaggregated prefill/decode on the cluster loop: conservation, the link, the records."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import configs, workloads
from test_stretches import preset_configs

from kvsched import EngineConfig
from kvsched.cluster.pd import Disaggregation, PdDecider
from kvsched.cluster.replicas import ReplicaSetup, run_cluster
from kvsched.cluster.transfer import Link
from kvsched.policies import make_policy
from kvsched.request import Request
from kvsched.routers import make_router
from kvsched.timing import ConstantStep, LinearStep

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)
ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_aware"]
seconds = st.one_of(
    st.sampled_from([0.02, 0.25]).map(ConstantStep),
    st.builds(LinearStep, base=st.sampled_from([0.001, 0.01]),
              per_prefill_token=st.sampled_from([0.0, 0.0005]),
              per_decode=st.sampled_from([0.0, 0.002]),
              per_kv_token=st.sampled_from([0.0, 0.00001])),
)


def pd_cluster(requests, config, clock, num_prefill, num_decode, *, bandwidth=1e4, fixed=0.01,
               per_token=8.0, prompt_over=0, routers=("round_robin", "round_robin"),
               stretches=True, decode_config=None):
    """A P/D cluster: `num_prefill` replicas of `config`, then `num_decode` (of
    `decode_config`, default the same), over a link of `bandwidth` bytes/s."""
    n = num_prefill + num_decode
    setups = ([ReplicaSetup(config, clock)] * num_prefill
              + [ReplicaSetup(decode_config or config, clock)] * num_decode)
    rng = np.random.default_rng(0)
    pd = Disaggregation(range(num_prefill), range(num_prefill, n),
                        make_router(routers[0], {}, num_prefill, rng),
                        make_router(routers[1], {}, num_decode, rng),
                        Link(bandwidth, fixed), per_token, PdDecider(prompt_over))
    result = run_cluster(requests, setups, [make_policy("fcfs") for _ in range(n)],
                         pd.decode_router, pd=pd, stretches=stretches)
    return result, pd


def roomy(config: EngineConfig) -> EngineConfig:
    return replace(config, max_steps=100_000, max_num_batched_tokens=max(
        256, config.max_num_batched_tokens), num_blocks=4000 // config.block_size)


@settings(**SETTINGS)
@given(workloads(max_requests=14), configs(), seconds, st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([0, 0, 20]), st.sampled_from(ROUTERS), st.sampled_from(ROUTERS),
       st.sampled_from([50.0, 1e4]))
def test_no_request_lost_each_kv_byte_moved_once_no_block_leaked(
        requests, config, clock, num_prefill, num_decode, prompt_over, prefill_router,
        decode_router, bandwidth):
    config = replace(config, max_steps=100_000)
    result, pd = pd_cluster(requests, config, clock, num_prefill, num_decode,
                            bandwidth=bandwidth, prompt_over=prompt_over,
                            routers=(prefill_router, decode_router))
    records = result.requests
    assert [r.request_id for r in records] == [r.request_id for r in requests]
    assert result.phases is not None
    for request, record, phases, first in zip(requests, records, result.phases,
                                              result.replica_of, strict=True):
        assert record.arrival_time == request.arrival_time
        assert record.status in ("finished", "starved", "rejected")  # none lost or stuck
        split = request.prompt_len > prompt_over
        assert (phases is not None) == split
        if not split:
            assert first >= num_prefill  # served whole by the decode pool
            continue
        assert first < num_prefill
        if phases.transfer_time is None:  # never got past its prefill: never on the link
            assert phases.decode is None and record.first_token_time is None
            continue
        assert phases.transfer_bytes == 8.0 * request.prompt_len
        # At least the fixed cost plus the bytes at the whole bandwidth; never earlier.
        assert phases.transfer_time >= 0.01 + phases.transfer_bytes / bandwidth - 1e-9
        assert phases.decode_replica >= num_prefill
        if record.status == "finished":
            # The client's first token comes from the decode instance, after its KV arrived.
            assert record.first_token_time > phases.transfer_start + phases.transfer_time - 1e-9
            assert record.ttft == record.first_token_time - request.arrival_time
    moved = [p for p in result.phases if p is not None and p.transfer_time is not None]
    # Every transfer begun was delivered once; the bytes moved are the prompts' KV, once each.
    assert pd.link.started == pd.link.delivered == len(moved)
    assert pd.link.moved == pytest.approx(sum(p.transfer_bytes for p in moved))
    assert result.summary["num_transferred"] == len(moved)
    assert not pd.link.busy
    for replica in result.replicas:  # every block given back on every instance
        assert replica.summary["final_blocks_used"] == 0


@settings(**SETTINGS)
@given(workloads(max_requests=12), configs(), seconds, st.integers(1, 2), st.integers(1, 3),
       st.sampled_from([50.0, 1e4]))
def test_stretches_give_the_exact_per_step_records(requests, config, clock, num_prefill,
                                                   num_decode, bandwidth):
    """A decode instance's stretch stops before any delivery it could be sent: jumping over
    steady decode steps gives the records of running every step."""
    config = replace(config, max_steps=100_000)
    fast, _ = pd_cluster(requests, config, clock, num_prefill, num_decode, bandwidth=bandwidth)
    exact, _ = pd_cluster(requests, config, clock, num_prefill, num_decode,
                          bandwidth=bandwidth, stretches=False)
    assert fast.requests == exact.requests
    assert fast.events == exact.events
    assert fast.replica_of == exact.replica_of
    for a, b in zip(fast.replicas, exact.replicas, strict=True):
        assert a.steps == b.steps


@settings(**SETTINGS)
@given(workloads(max_requests=10, max_prompt=200), configs(), seconds)
def test_the_decode_instance_computes_only_the_last_prompt_token(requests, config, clock):
    """A split request's KV arrives whole: its decode instance prefills one token (vLLM's
    last-token recompute), so prefill tokens are the prompts plus one per decode admission."""
    config = roomy(replace(config, preemption="recompute"))
    result, _ = pd_cluster(requests, config, clock, 1, 1)
    prefill, decode = result.replicas
    assert all(r.status == "finished" for r in result.requests)
    assert prefill.summary["prefill_tokens"] == sum(r.prompt_len for r in requests)
    if not decode.summary["num_preemptions"]:
        assert decode.summary["prefill_tokens"] == len(requests)


def test_link_shares_its_bandwidth_fairly():
    """Two transfers flowing together each get half the link; the second, alone after the
    first ends, gets all of it."""
    link = Link(bandwidth=100.0, fixed=0.0)
    link.begin(1, 0.0, 100.0)
    link.begin(2, 0.0, 300.0)
    delivered = []
    while link.busy:
        t = link.next_time()
        delivered += [(key, t) for key, _, _ in link.advance(t)]
    # Both at 50 B/s until 2 s (1 is done), then 200 B left for 2 at 100 B/s: 4 s.
    assert delivered == [(1, pytest.approx(2.0)), (2, pytest.approx(4.0))]
    assert link.moved == 400.0


def test_link_fixed_cost_comes_before_the_bytes():
    link = Link(bandwidth=10.0, fixed=0.5)
    link.begin(7, 1.0, 10.0)
    times = []
    while link.busy:
        t = link.next_time()
        times += [t for _ in link.advance(t)]
    assert times == [pytest.approx(2.5)]


def test_a_late_transfer_slows_the_one_under_way():
    link = Link(bandwidth=10.0, fixed=0.0)
    link.begin(1, 0.0, 20.0)  # alone: would end at 2 s
    assert link.next_time() == 0.0  # its bytes start flowing
    assert link.advance(0.0) == []
    assert link.next_time() == pytest.approx(2.0)
    link.advance(1.0)  # 10 B left
    link.begin(2, 1.0, 20.0)
    out = {}
    while link.busy:
        t = link.next_time()
        out.update({key: t for key, _, _ in link.advance(t)})
    assert out == {1: pytest.approx(3.0), 2: pytest.approx(4.0)}


def test_prompt_over_keeps_short_prompts_whole():
    requests = [Request(f"r{i}", 0.1 * i, prompt, 5) for i, prompt in
                enumerate([10, 400, 20, 800])]
    config = EngineConfig(max_num_batched_tokens=1024, num_blocks=400, block_size=16)
    result, pd = pd_cluster(requests, config, ConstantStep(0.01), 1, 2, prompt_over=100)
    assert [p is not None for p in result.phases] == [False, True, False, True]
    assert [k >= 1 for k in result.replica_of] == [True, False, True, False]
    assert result.summary["num_split"] == 2
    assert pd.link.delivered == 2


def test_each_pool_routes_with_its_own_router():
    """prefix_aware on the prefill pool sends a prompt to the instance that holds its prefix
    (each group's second request lands where its first was prefilled); least_kv on the decode
    pool balances the decode instances' memory."""
    from kvsched.prefix import Prefix

    config = EngineConfig(max_num_batched_tokens=2048, num_blocks=2000, block_size=16,
                          enable_prefix_caching=True)
    requests = []
    for i in range(8):
        group = i % 4
        requests.append(Request(f"r{i}", 0.2 * i, 600, 100,
                                prefix=Prefix(((1000 + group, 512), (2000 + i, 88)))))
    result, _ = pd_cluster(requests, config, ConstantStep(0.01), 2, 2,
                           routers=("prefix_aware", "least_kv"))
    first = {r.request_id: k for r, k in zip(requests, result.replica_of, strict=True)}
    for i in range(4, 8):
        assert first[f"r{i}"] == first[f"r{i - 4}"]
    assert {p.decode_replica for p in result.phases} == {2, 3}
    # The prefill instances' hits are the client's records' hits.
    assert [r.prefix_hit_tokens for r in result.requests][4:] == [512] * 4


@settings(**SETTINGS)
@given(workloads(max_requests=12), preset_configs(), seconds, st.integers(1, 2),
       st.integers(1, 2), st.booleans())
def test_every_engine_family_admits_received_kv(requests, config, clock, num_prefill,
                                                num_decode, fast):
    """Under every preset's rules (vLLM V1's running loop, SGLang's future-token admission,
    V0's prefill-first...), with or without prefix caching, a split request is never lost,
    the link delivers every KV it is given once, no instance keeps a block, and stretches
    give the exact path's records."""
    config = replace(config, max_steps=100_000, max_queued_requests=None)
    result, pd = pd_cluster(requests, config, clock, num_prefill, num_decode, stretches=fast)
    assert [r.request_id for r in result.requests] == [r.request_id for r in requests]
    assert all(r.status in ("finished", "starved", "rejected") for r in result.requests)
    assert pd.link.started == pd.link.delivered == result.summary["num_transferred"]
    for replica in result.replicas:
        assert replica.summary["final_blocks_used"] == 0
    if fast:
        exact, _ = pd_cluster(requests, config, clock, num_prefill, num_decode,
                              stretches=False)
        assert exact.requests == result.requests and exact.events == result.events
