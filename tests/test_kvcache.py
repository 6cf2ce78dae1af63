"""KV caches with block identity: vLLM's hashed blocks and SGLang's radix tree, against the
counting pool and against what was computed before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_counting import CountingPool

from kvsched.kvcache import HashedBlockCache, RadixCache
from kvsched.prefix import Prefix, common_prefix

BLOCK = 4


def prompts():
    """Prompts built from a few shared segments (system prompts, turns) and unique tails."""
    shared = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 12)), max_size=3)
    return st.builds(lambda head, tail_id, tail: Prefix(tuple(head) + ((tail_id, tail),)),
                     shared, st.integers(100, 10_000), st.integers(1, 12))


ops = st.lists(st.tuples(st.sampled_from(["start", "grow", "finish"]), st.integers(0, 5),
                         prompts()), min_size=1, max_size=40)


def run_ops(cache, operations):
    """Requests start (matching their prefix), grow and finish; returns the hits seen and,
    per hit, the longest prefix any earlier request had committed."""
    live: dict[int, tuple[Prefix, int]] = {}
    committed: list[Prefix] = []
    seen = []
    for op, owner, prefix in operations:
        if op == "start" and owner not in live:
            tokens = prefix.num_tokens
            hit = cache.match(prefix, tokens)
            need = -(-tokens // BLOCK) - hit // BLOCK
            if not cache.can_allocate(prefix, hit, need):
                continue
            before = max((common_prefix(prefix.segments, c.segments) for c in committed),
                         default=0)
            seen.append((hit, before, tokens))
            cache.allocate(owner, prefix, hit, need)
            cache.commit(owner, prefix, tokens)
            committed.append(prefix)
            live[owner] = (prefix, tokens)
        elif op == "grow" and owner in live:
            prefix, tokens = live[owner]
            if tokens % BLOCK == 0 and cache.can_allocate(None, 0, 1):
                cache.allocate(owner, None, 0, 1)
            live[owner] = (prefix, tokens + 1)
        elif op == "finish" and owner in live:
            cache.free(owner)
            del live[owner]
        if hasattr(cache, "check"):
            cache.check()
    return seen


@settings(max_examples=300, deadline=None)
@given(ops, st.sampled_from([HashedBlockCache, RadixCache]), st.integers(6, 40))
def test_hits_never_exceed_what_was_computed_before(operations, kind, num_blocks):
    """A hit is whole blocks, below the prompt's length, within an earlier request's prefix;
    blocks are conserved and referenced blocks are never evicted (check())."""
    cache = kind(num_blocks, BLOCK)
    for hit, before, tokens in run_ops(cache, operations):
        assert hit % BLOCK == 0
        assert hit <= tokens - 1
        assert hit <= before


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["start", "grow", "finish"]), st.integers(0, 5),
                          st.integers(1, 30)), max_size=40), st.integers(6, 40))
def test_nothing_shared_behaves_as_the_counting_pool(operations, num_blocks):
    """Unique prompts: the hashed cache never hits and frees exactly as the counting pool."""
    unique = [(op, owner, Prefix(((10_000 + i, tokens),)))
              for i, (op, owner, tokens) in enumerate(operations)]
    hashed, counting = HashedBlockCache(num_blocks, BLOCK), CountingPool(num_blocks, BLOCK)
    assert [h for h, _, _ in run_ops(hashed, unique)] == [0] * len(
        run_ops(counting, unique))
    assert hashed.num_free == counting.num_free


def test_vllm_evicts_only_when_a_block_is_needed_and_tail_first():
    cache = HashedBlockCache(6, BLOCK)
    a = Prefix(((1, 12),))  # three full blocks
    cache.allocate(0, a, 0, 3)
    cache.commit(0, a, 12)
    cache.free(0)
    assert cache.num_cached == 3 and cache.num_free == 6  # freed, still cached
    assert cache.match(a, 13) == 12 and cache.match(a, 12) == 8  # at most num_tokens - 1
    # Three fresh blocks come from the never-used ones first; the fourth evicts a's tail.
    cache.allocate(1, None, 0, 4)
    assert cache.num_cached == 2 and cache.evicted == 1
    assert cache.match(a, 13) == 8  # its first two blocks survive: its tail went first


def test_vllm_shares_a_running_requests_blocks():
    cache = HashedBlockCache(8, BLOCK)
    system = (7, 8)
    a, b = Prefix((system, (100, 4))), Prefix((system, (200, 4)))
    cache.allocate(0, a, 0, 3)
    cache.commit(0, a, 12)
    hit = cache.match(b, 12)
    assert hit == 8
    cache.allocate(1, b, hit, 1)
    assert cache.num_free == 8 - 4  # the two system blocks counted once
    assert cache.blocks_of(1)[:2] == cache.blocks_of(0)[:2]
    cache.free(0)
    cache.allocate(2, None, 0, 4)  # pressure: the shared blocks are held by b, never evicted
    assert cache.match(b, 12) == 8
    cache.check()


def test_radix_evicts_the_least_recently_used_unlocked_leaf():
    cache = RadixCache(6, BLOCK)  # 24 tokens
    old, new = Prefix(((1, 8),)), Prefix(((2, 8),))
    for owner, prefix in ((0, old), (1, new)):
        cache.allocate(owner, prefix, 0, 2)
        cache.commit(owner, prefix, 8)
        cache.free(owner)
    assert cache.match(old, 9) == 8 and cache.match(new, 9) == 8
    cache.match(new, 9)  # touched last
    cache.allocate(2, None, 0, 4)  # 16 tokens: 8 free, 8 evicted
    assert cache.match(old, 9) == 0 and cache.match(new, 9) == 8
    cache.check()


def test_radix_refuses_an_eviction_key_past_its_range():
    """The heap key (last access, tie) must fit a 64-bit integer: an access time of 2**31
    walks raises instead of wrapping."""
    cache = RadixCache(6, BLOCK)
    prefix = Prefix(((1, 8),))
    cache._clock = (1 << 31) - 1
    cache.allocate(0, prefix, 0, 2)
    cache.commit(0, prefix, 8)
    with pytest.raises(OverflowError):
        cache.free(0)  # the unlocked leaf becomes a candidate


def test_radix_keeps_a_running_requests_prefix_and_frees_duplicates():
    cache = RadixCache(10, BLOCK)
    shared = (5, 8)
    a, b = Prefix((shared, (100, 4))), Prefix((shared, (200, 4)))
    cache.allocate(0, a, 0, 3)
    cache.allocate(1, b, 0, 3)  # both compute the shared 8 tokens (no hit yet)
    cache.commit(0, a, 12)
    before = cache.free_tokens
    cache.commit(1, b, 12)  # b's copy of the shared tokens is a duplicate: freed
    assert cache.free_tokens == before + 8
    cache.allocate(2, None, 0, 10 - 5)  # pressure: running a and b keep their paths
    assert cache.match(a, 13) == 12 and cache.match(b, 13) == 12
    cache.check()


def test_radix_branches_at_the_start_of_a_page_left_inside_it():
    """Pages of 4: b shares 6 tokens with a, so SGLang 0.5.23 matches 4 (whole pages), keeps
    b's tokens 4-11 as a second child of the first page (its first page differs from a's),
    and caches 20 tokens, the shared 4 and 5 a second time (recorded from UnifiedRadixCache
    and RadixCache: insert prefix_len 4, evictable 20; a match of a's 8 tokens then finds 8,
    and an eviction of 5 takes b's 8-token leaf, the least recently used)."""
    cache = RadixCache(100, 4)
    a, b = Prefix(((1, 12),)), Prefix(((1, 6), (2, 6)))
    assert cache._insert(a, 12) == 0
    assert cache._insert(b, 12) == 4
    assert (cache.tree_tokens, cache.evictable_tokens()) == (20, 20)
    node, matched = cache._walk(a, 8, True)
    assert matched == 8
    cache._lock(node, 1)
    assert cache.evictable_tokens() == 12  # a's first two pages are locked
    cache.evicted_log = []
    cache._evict(5)
    assert cache.evicted_log == [(4, 8, (1, 4))]  # b's leaf: depth 4, 8 tokens
    assert cache.match(b, 12) == 4 and cache.match(a, 12) == 8
    cache.check()


def test_prefix_hashes_follow_shared_tokens():
    a = Prefix(((1, 10), (2, 6)))
    b = Prefix(((1, 10), (3, 6)))
    ha, hb = a.block_hashes(4), b.block_hashes(4)
    assert len(ha) == 4 and ha[:2] == hb[:2] and ha[2] != hb[2]  # block 2 mixes seg 1 and 2
    assert common_prefix(a.segments, b.segments) == 10
    assert common_prefix(((1, 5),), ((1, 9),)) == 5
    with pytest.raises(ValueError):
        Prefix(((1, 0),))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3)), min_size=1, max_size=6),
       st.sampled_from([1, 4]))
def test_radix_grow_passes_takes_what_the_passes_would(owners, size):
    """Decode passes that evict nothing, in one move (a stretch's): the same pages held,
    promised and free as grow_promise and decode_pass pass by pass."""
    def build():
        cache = RadixCache(400 // size, size)
        for owner, (blocks, _passes) in enumerate(owners):
            cache.allocate(owner, Prefix(((owner, blocks * size),)), 0, blocks)
        return cache

    by_pass, at_once = build(), build()
    for k in range(1, 4):
        growing = [owner for owner, (_blocks, passes) in enumerate(owners) if passes >= k]
        by_pass.grow_promise(growing)
        by_pass.decode_pass(len(owners))
    at_once.grow_passes([(owner, passes) for owner, (_b, passes) in enumerate(owners)])
    assert by_pass.evicted == at_once.evicted == 0
    for cache in (by_pass, at_once):
        cache.check()
    def held(cache):
        return ({owner: (run.private, run.promised) for owner, run in cache._runs.items()},
                cache.free_tokens, cache.num_free)

    assert held(by_pass) == held(at_once)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9)), min_size=1, max_size=5),
       st.sampled_from([1, 2, 4, 8]), st.randoms(use_true_random=False))
def test_block_keys_name_a_blocks_tokens(segments, size, rng):
    """A block inside one segment is (segment id, first offset), else its pieces: read off
    the prefix's tokens one by one, whatever the order of the lookups (a lookup starts
    where the last one ended)."""
    prefix = Prefix(tuple(segments))
    tokens = [(seg_id, offset) for seg_id, length in segments for offset in range(length)]
    positions = list(range(len(tokens) // size))
    rng.shuffle(positions)
    for position in positions:
        block = tokens[position * size:(position + 1) * size]
        if all(seg_id == block[0][0] for seg_id, _ in block) and all(
                b[1] == block[0][1] + i for i, b in enumerate(block)):
            expected: tuple = block[0]
        else:
            runs: list[list[int]] = []
            for seg_id, offset in block:
                if runs and runs[-1][0] == seg_id and runs[-1][2] == offset:
                    runs[-1][2] += 1
                else:
                    runs.append([seg_id, offset, offset + 1])
            expected = tuple(tuple(run) for run in runs)
        assert prefix.block_key(size, position) == expected
        assert prefix.token_key(position * size) == block[0]
