"""A cache kind is its class and one line in `kvsched.config.PREFIX_CACHES`: a cache written
to the `KVCache` protocol alone (here it hands every call to vLLM's hashed cache, so its runs
must be the hashed cache's to the last record) runs under both prefix accountings."""

from __future__ import annotations

import pytest

import kvsched.config as config
import kvsched.kvcache.tracker as tracker
from kvsched import EngineConfig, StepClock, make_policy, simulate
from kvsched.kvcache.hashed import HashedBlockCache
from kvsched.prefix import Prefix
from kvsched.request import Request


class Plain:
    """Only the protocol's members (kvsched/kvcache/base.py)."""

    commits_running = True

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self._cache = HashedBlockCache(num_blocks, block_size)
        self.num_blocks, self.block_size = num_blocks, block_size

    @property
    def spill(self):
        return self._cache.spill

    @spill.setter
    def spill(self, tier) -> None:
        self._cache.spill = tier

    num_free = property(lambda self: self._cache.num_free)
    num_cached = property(lambda self: self._cache.num_cached)
    evicted_blocks = property(lambda self: self._cache.evicted_blocks)

    def match(self, prefix, num_tokens, whole=False):
        return self._cache.match(prefix, num_tokens, whole)

    def idle_hits(self, prefix, hit_tokens):
        return self._cache.idle_hits(prefix, hit_tokens)

    def allocate(self, owner, prefix, hit_tokens, num_new):
        self._cache.allocate(owner, prefix, hit_tokens, num_new)

    def grow_each(self, owners):
        self._cache.grow_each(owners)

    def commit(self, owner, prefix, num_tokens, prompt_tokens=0):
        self._cache.commit(owner, prefix, num_tokens, prompt_tokens)

    def shrink(self, owner, num_blocks):
        self._cache.shrink(owner, num_blocks)

    def free(self, owner):
        self._cache.free(owner)


@pytest.fixture
def plain_registered(monkeypatch):
    kinds = {**config.PREFIX_CACHES, "plain": (f"{__name__}:Plain", "a protocol-only cache")}
    monkeypatch.setattr(tracker, "PREFIX_CACHES", kinds)
    monkeypatch.setitem(config._CHOICES, "prefix_cache", tuple(kinds))


@pytest.mark.parametrize("accounting", ["v1", "v0"])
def test_a_protocol_only_cache_runs_as_the_cache_it_wraps(plain_registered, accounting):
    shared = Prefix(((7, 48),))
    requests = [Request(f"r{i}", float(i % 5), 50 + 9 * (i % 4), 6 + i % 7,
                        prefix=shared if i % 3 else None) for i in range(24)]
    runs = {}
    for kind in ("hashed", "plain"):
        engine = EngineConfig(num_blocks=24, block_size=8, enable_prefix_caching=True,
                              prefix_cache=kind, prefix_accounting=accounting)
        run = simulate(requests, engine, make_policy("fcfs"), StepClock())
        runs[kind] = ([r.as_row() for r in run.requests], run.steps, run.events)
    assert runs["plain"] == runs["hashed"]
    assert any(row[-1] for row in runs["plain"][0])  # hits happened
