"""The prefix caches kept on runs answer every question exactly as they did kept block by block
or piece by piece (tests/reference_hashed.py, tests/reference_radix.py): the same hits, idle
hits, free and cached counts and evictions after any sequence of admissions, growth, commits,
shrinks and frees."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from reference_hashed import HashedBlockCache as BlockByBlock
from reference_radix import RadixCache as PieceTree

from kvsched.kvcache import HashedBlockCache, RadixCache
from kvsched.kvcache import hashed as hashed_module
from kvsched.prefix import Prefix


def from_source(module):
    """`module` loaded from its Python source, whichever build the import took."""
    source = Path(module.__file__).with_name(module.__name__.rpartition(".")[2] + ".py")
    spec = importlib.util.spec_from_file_location(module.__name__ + "_source", source)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


# The build the import took and the plain source (the same one when nothing is compiled).
HASHED_BUILDS = [HashedBlockCache, from_source(hashed_module).HashedBlockCache]


def chains():
    """Prefixes from a few shared segments (some repeated, some cut short) and a private
    tail, so that chains share, diverge inside blocks and repeat whole prompts."""
    shared = st.lists(st.tuples(st.integers(1, 4), st.integers(1, 9)), max_size=4)
    return st.builds(lambda head, tail: Prefix(tuple(head) + tail), shared,
                     st.one_of(st.just(()), st.tuples(st.tuples(st.integers(50, 53),
                                                               st.integers(1, 9)))))


steps = st.lists(st.tuples(
    st.sampled_from(["admit", "admit", "grow", "commit", "commit", "free", "shrink", "touch",
                     "grow_each"]),
    st.integers(0, 5), st.integers(0, 40), st.integers(0, 7)), max_size=60)


def observe(cache, pool: list[Prefix]) -> tuple:
    seen = [cache.num_free, cache.num_cached, cache.evicted]
    for prefix in pool:
        for tokens in (prefix.num_tokens, prefix.num_tokens + 1, 5):
            hit = cache.match(prefix, tokens)
            seen += [hit, cache.idle_hits(prefix, hit), cache.idle_hits(prefix, hit + 4)]
    return tuple(seen)


def apply(cache, step: tuple, prefixes: list[Prefix], held: dict[int, int], bs: int,
          within: bool = False):
    """One operation as the scheduler makes them; returns what it answered or raised.
    `within`: commits stay within the blocks held (SGLang's tree does not cap them)."""
    op, owner, a, b = step
    prefix = prefixes[owner]
    try:
        if op == "admit" and owner not in held:
            tokens = min(max(1, a), prefix.num_tokens)
            hit = cache.match(prefix, tokens)
            need = -(-tokens // bs) - hit // bs
            if b == 7:  # a stale hit: the cache says no
                hit += bs
            if not cache.can_allocate(prefix, hit, need):
                return "full"
            cache.allocate(owner, prefix, hit, need)
            held[owner] = hit // bs + need
            cache.commit(owner, prefix, min(tokens, hit + b * bs))
        elif op == "grow" and owner in held:
            if not cache.can_allocate(None, 0, b):
                return "full"
            cache.allocate(owner, None, 0, b)
            held[owner] += b
        elif op == "grow_each" and held:
            owners = sorted(held)[:1 + b % len(held)]  # a decode pass's boundaries
            if not cache.can_allocate(None, 0, len(owners)):
                return "full"
            if hasattr(cache, "grow_each"):
                cache.grow_each(owners)
            else:  # the oracles: one by one
                for each in owners:
                    cache.allocate(each, None, 0, 1)
            for each in owners:
                held[each] += 1
        elif op == "commit" and owner in held:
            cache.commit(owner, prefix, min(a, held[owner] * bs) if within else a)
        elif op == "shrink" and owner in held and held[owner]:
            n = 1 + b % held[owner]
            cache.shrink(owner, n)
            held[owner] -= n
        elif op == "free":
            cache.free(owner)
            held.pop(owner, None)
        elif op == "touch":
            return cache.match(prefix, a), cache.idle_hits(prefix, a)
    except ValueError as error:
        return f"error: {str(error).split(':')[0]}"
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(chains(), min_size=6, max_size=6), steps, st.integers(2, 4),
       st.integers(4, 40), st.sampled_from(HASHED_BUILDS))
def test_runs_answer_as_block_by_block(prefixes, operations, block_size, num_blocks, build):
    """After every operation both caches agree on everything a scheduler can ask (the
    compiled build and the source alike)."""
    runs, blocks = build(num_blocks, block_size), BlockByBlock(num_blocks, block_size)
    held_runs: dict[int, int] = {}
    held_blocks: dict[int, int] = {}
    for step in operations:
        assert apply(runs, step, prefixes, held_runs, block_size) == apply(
            blocks, step, prefixes, held_blocks, block_size), step
        runs.check()
        assert observe(runs, prefixes) == observe(blocks, prefixes), step
    for owner in list(held_runs):
        runs.free(owner)
        blocks.free(owner)
    runs.check()
    assert runs.num_free == num_blocks
    assert observe(runs, prefixes) == observe(blocks, prefixes)


def observe_radix(cache, pool: list[Prefix]) -> tuple:
    seen = [cache.num_free, cache.num_cached, cache.evicted, cache.free_tokens,
            cache.tree_tokens, cache.evictable_tokens()]
    for prefix in pool:
        for tokens in (prefix.num_tokens, prefix.num_tokens + 1, 5):
            hit = cache.match(prefix, tokens)
            seen += [hit, cache.idle_hits(prefix, hit), cache.idle_hits(prefix, hit + 3),
                     cache.can_allocate(prefix, hit, 2)]
    return tuple(seen)


@settings(max_examples=300, deadline=None)
@given(st.lists(chains(), min_size=6, max_size=6), steps, st.integers(1, 4),
       st.integers(4, 40))
def test_radix_on_token_ranges_answers_as_on_pieces(prefixes, operations, block_size,
                                                    num_blocks):
    """SGLang's tree with edges as token ranges of a chain: after every operation it agrees
    with the tree of piece tuples on hits, locks, free and evictable tokens, evictions."""
    ranges, pieces = RadixCache(num_blocks, block_size), PieceTree(num_blocks, block_size)
    held_ranges: dict[int, int] = {}
    held_pieces: dict[int, int] = {}
    for step in operations:
        if step[0] == "shrink":  # (SGLang's tree gives back only a block just taken)
            step = ("grow", *step[1:])
        assert apply(ranges, step, prefixes, held_ranges, block_size, True) == apply(
            pieces, step, prefixes, held_pieces, block_size, True), step
        ranges.check()
        assert observe_radix(ranges, prefixes) == observe_radix(pieces, prefixes), step
