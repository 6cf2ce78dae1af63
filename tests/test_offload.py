"""The host tier under the prefix cache (`engine.kv_offload`): evicted blocks kept in host
memory, loaded back at the link's cost, no block leaked on either tier."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_invariants import check_invariants, configs, policies
from test_prefix_caching import caches, caching, outcome, shared_workloads

from kvsched import EngineConfig, Request, make_policy, simulate
from kvsched.engine import mechanism
from kvsched.kvcache.offload import HostTier
from kvsched.kvcache.tracker import PrefixTracker, make_tracker
from kvsched.prefix import Prefix
from kvsched.timing import ConstantStep, LinearStep

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
seconds = st.one_of(st.sampled_from([0.02, 0.25]).map(ConstantStep),
                    st.builds(LinearStep, base=st.sampled_from([0.001, 0.01]),
                              per_prefill_token=st.sampled_from([0.0, 0.0005])))


def hosting(config: EngineConfig, blocks: int, cache: str = "hashed") -> EngineConfig:
    return dataclasses.replace(caching(config, cache=cache), kv_offload_blocks=blocks,
                               kv_offload_gbps=8.0, kv_offload_block_bytes=1000.0)


@settings(max_examples=150, **SETTINGS)
@given(shared_workloads(), configs(), policies, seconds, caches, st.sampled_from([1, 4, 64]))
def test_no_block_leaked_on_either_tier(requests, config, policy, clock, cache, host_blocks):
    """Every run invariant holds with a host tier; at every release the GPU cache's blocks
    are free xor held and the host holds what it stored less what it pushed out, within its
    capacity; what is loaded back is never more than the prompt's tokens but the last."""
    config = hosting(config, host_blocks, cache)
    tiers = []

    class Checked(PrefixTracker):  # (the compiled tracker's methods are overridden, not set)
        def release(self, seq, computed):
            super().release(seq, computed)
            self.cache.check()
            self.host.check()
            assert self.pool.free == self.cache.num_free

    def checked_tracker(config, pool):
        made = make_tracker(config, pool)
        tracker = Checked(made.cache, pool, made.host)
        tiers.append(tracker)
        return tracker

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mechanism, "make_tracker", checked_tracker)
        result = simulate(requests, config, policy, clock)
    check_invariants(requests, config, result)
    (tracker,) = tiers
    tracker.host.check()
    summary = result.summary
    assert summary["host_loaded_tokens"] == tracker.host_tokens
    assert summary["host_loaded_blocks"] * config.block_size == tracker.host_tokens
    assert summary["host_stored_blocks"] - summary["host_dropped_blocks"] == len(tracker.host)
    assert 0 <= summary["host_hit_rate"] <= 1
    assert summary["total_hit_rate"] == summary["prefix_hit_rate"] + summary["host_hit_rate"]
    if all(r.status == "finished" for r in result.requests):
        assert summary["final_blocks_used"] == 0


@settings(max_examples=150, **SETTINGS)
@given(shared_workloads(), configs(), policies, seconds, caches)
def test_stretches_equal_the_exact_path_with_a_host_tier(requests, config, policy, clock,
                                                         cache):
    config = hosting(config, 16, cache)
    assert outcome(simulate(requests, config, policy, clock)) == outcome(
        simulate(requests, config, policy, clock, stretches=False))


def evicted_then_back(host_blocks: int, gbps: float = 8.0):
    """r0 computes a 64-token prompt; two private prompts take the whole pool (evicting it);
    r3 brings r0's prompt back."""
    shared = Prefix(((7, 64),))
    requests = [Request("r0", 0.0, 64, 1, prefix=shared),
                Request("r1", 1.0, 60, 1), Request("r2", 1.0, 60, 1),
                Request("r3", 2.0, 65, 1, prefix=Prefix(((7, 64), (8, 1))))]
    config = EngineConfig(max_num_batched_tokens=256, block_size=16, num_blocks=8,
                          watermark=0.0, enable_prefix_caching=True)
    if host_blocks:
        config = dataclasses.replace(config, kv_offload_blocks=host_blocks,
                                     kv_offload_gbps=gbps, kv_offload_block_bytes=1000.0)
    return simulate(requests, config, make_policy("fcfs"), ConstantStep(0.01))


def test_an_evicted_prefix_comes_back_from_host_at_the_links_cost():
    without, with_host = evicted_then_back(0), evicted_then_back(16)
    assert without.requests[3].prefix_hit_tokens == 0  # the GPU forgot it
    assert with_host.requests[3].prefix_hit_tokens == 0  # the GPU tier's hit, still none
    admit = [e for e in with_host.events if e[2] == "r3" and e[3] == "admit"]
    assert admit[0][4] == "prefill 65 tokens, 64 from host"
    assert with_host.summary["host_loaded_blocks"] == 4
    assert with_host.summary["host_hit_rate"] == pytest.approx(64 / (64 + 60 + 60 + 65))
    # r3's step computed 1 token, not 65; its 4 blocks of 1000 bytes at 8 Gb/s (4 us) load
    # while it runs: the step lasts its compute.
    step = [row for row in with_host.steps if row[1] == 2.0][0]
    assert step[6] == 1 and step[2] == 0.01
    assert without.summary["prefill_tokens"] - with_host.summary["prefill_tokens"] == 64


def test_a_load_longer_than_the_step_sets_its_length():
    """At 100 kb/s the 4 blocks take 0.32 s: the step lasts that (a step cannot end before
    the KV it attends to has arrived)."""
    slow = evicted_then_back(16, gbps=1e-4)
    step = [row for row in slow.steps if row[1] == 2.0][0]
    assert step[6] == 1 and step[2] == pytest.approx(0.32)


def test_a_host_too_small_keeps_the_head_of_a_prefix():
    """The host drops a run's tail first: a run past a missing block is of no use."""
    host = HostTier(2, 16)
    chain = Prefix(((7, 64),))
    host.put(chain, 0, 4)
    assert len(host) == 2 and host.dropped == 2
    assert host.run(chain, 0, 4) == 2  # blocks 0 and 1 kept
    host.check()


@pytest.mark.parametrize("engine, time, says", [
    ("{kv_offload: {host_blocks: 10, bandwidth_gbps: 64}}", "{kind: constant, step_time: 0.01}",
     "needs enable_prefix_caching"),
    ("{enable_prefix_caching: true, kv_offload: {host_blocks: 10, bandwidth_gbps: 64}}",
     "{kind: constant, step_time: 0.01}", "kv_offload.block_bytes: needed"),
    ("{enable_prefix_caching: true, kv_offload: {host_blocks: 10, bandwidth_gbps: 64, "
     "block_bytes: 100}}", "{kind: steps}", "not the step clock"),
    ("{enable_prefix_caching: true, kv_offload: {host_blocks: 0, bandwidth_gbps: 64}}",
     "{kind: constant, step_time: 0.01}", "host_blocks"),
    ("{enable_prefix_caching: true, kv_offload: {host_blocks: 1, bandwith_gbps: 64}}",
     "{kind: constant, step_time: 0.01}", "bandwith_gbps"),
])
def test_bad_kv_offload_is_one_line_exit_2(tmp_path, engine, time, says):
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nengine: {engine}\ntime: {time}\nworkload: {{kind: synthetic, "
                    "num_requests: 3, arrival: {kind: poisson, rate: 1}, prompt_len: 10, "
                    "output_len: 2}\n")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and str(path) in lines[0], lines
    assert not (tmp_path / "out").exists()
