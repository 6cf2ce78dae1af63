"""Cache-aware waiting-queue policies (lpm, dfs-weight, hrrn) and the dynamic waiting queue."""

from __future__ import annotations

import inspect
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvsched import EngineConfig, Request, make_policy, simulate
from kvsched.cli import app
from kvsched.kvcache import HashedBlockCache, RadixCache
from kvsched.policies import DfsWeight, HighestResponseRatio, LongestPrefixMatch
from kvsched.prefix import Prefix
from kvsched.sequence import Seq, SeqState
from kvsched.waiting import WaitingQueue

BLOCK = 16
SYSTEM = (1, 64)  # a system prompt shared by a group: segment 1, 64 tokens


def seq(rid: str, prompt_len: int = 200, segments: tuple = (), index: int = 0,
        enqueue_time: float = 0.0) -> Seq:
    """A waiting request whose prompt starts with `segments` (then its own tokens)."""
    prefix = Prefix(tuple(segments)) if segments else None
    s = Seq.of(Request(rid, enqueue_time, prompt_len, 8, prefix=prefix), index, BLOCK)
    s.state = SeqState.WAITING
    s.enqueue_time = enqueue_time
    return s


class FakeView:
    """A CacheView whose hits are given per request id."""

    block_size = BLOCK
    num_free = 100
    num_cached = 0

    def __init__(self, hits: dict[str, int] | None = None) -> None:
        self.hits = hits or {}
        self.calls = 0

    def match(self, s: Seq) -> int:
        self.calls += 1
        return self.hits.get(s.request.request_id, 0)


class CacheAdapter:
    """A CacheView over a standalone KVCache: what each request's (re)prefill would hit."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self.block_size = cache.block_size

    @property
    def num_free(self) -> int:
        return self.cache.num_free

    @property
    def num_cached(self) -> int:
        return self.cache.num_cached

    def match(self, s: Seq) -> int:
        return self.cache.match(s.request.prefix, s.prompt_len + s.generated)


def cached_after(kind, *prompts: tuple) -> CacheAdapter:
    """A cache of `kind` in which each of `prompts` (segment tuples) was computed, then freed."""
    cache = kind(num_blocks=256, block_size=BLOCK)
    for owner, segments in enumerate(prompts):
        prefix = Prefix(segments)
        tokens = prefix.num_tokens
        cache.allocate(owner, prefix, 0, -(-tokens // BLOCK))
        cache.commit(owner, prefix, tokens)
        cache.free(owner)
    return CacheAdapter(cache)


def ids(seqs) -> list[str]:
    return [s.request.request_id for s in seqs]


# -- lpm ---------------------------------------------------------------------------------


def test_lpm_serves_the_longest_cached_prefix_first_ties_in_queue_order():
    """lpm sorts by cached tokens, longest first; equal hits keep their queue order."""
    queue = [seq("a"), seq("b"), seq("c"), seq("d"), seq("e")]
    view = FakeView({"a": 48, "b": 160, "c": 48, "e": 96})
    assert ids(LongestPrefixMatch().order(queue, 0.0, view)) == ["b", "e", "a", "c", "d"]


def test_lpm_in_batch_check_sends_cold_requests_sharing_a_prefix_back():
    """Of cold requests sharing >= 32 tokens only the first keeps its place; the others go
    last (in queue order), while a short share or a warm request is never deprioritised."""
    queue = [seq("cold1", segments=(SYSTEM, (10, 50))),
             seq("cold2", segments=(SYSTEM, (11, 50))),   # shares 64 with cold1: back
             seq("other", segments=((2, 31), (12, 50))),
             seq("near", segments=((2, 31), (13, 50))),    # shares 31 < 32: stays
             seq("warm", segments=(SYSTEM, (14, 50))),     # 48 cached > 32: not checked
             seq("cold3", segments=(SYSTEM, (15, 50)))]    # shares with cold1: back
    view = FakeView({"warm": 48, "other": 16})
    order = ids(LongestPrefixMatch().order(queue, 0.0, view))
    assert order == ["warm", "other", "cold1", "near", "cold2", "cold3"]
    # The thresholds are parameters: -1 turns the check off; a higher bar keeps them all.
    off = ids(LongestPrefixMatch(check_threshold=-1).order(queue, 0.0, view))
    assert off == ["warm", "other", "cold1", "cold2", "near", "cold3"]
    assert ids(LongestPrefixMatch(deprioritize_threshold=65).order(queue, 0.0, view)) == off


def test_lpm_falls_back_to_fcfs_above_128_waiting():
    """With more than 128 waiting lpm does not sort (nor look at the cache): the queue keeps
    its order; at 128 it sorts."""
    queue = [seq(f"r{i}", index=i) for i in range(129)]
    view = FakeView({"r128": 160, "r5": 64})
    assert LongestPrefixMatch().order(queue, 0.0, view) == queue
    assert view.calls == 0
    sorted_128 = ids(LongestPrefixMatch().order(queue[1:], 0.0, view))
    assert sorted_128[:2] == ["r128", "r5"]
    assert ids(LongestPrefixMatch(fcfs_above=200).order(queue, 0.0, view))[0] == "r128"


def test_lpm_and_dfs_weight_without_a_cache_are_fcfs():
    """With no prefix caching (view None) lpm and dfs-weight leave the queue as it stands,
    as SGLang turns cache-aware policies into fcfs when the radix cache is off."""
    queue = [seq("a", segments=(SYSTEM,)), seq("b", segments=(SYSTEM,)), seq("c")]
    assert LongestPrefixMatch().order(queue, 5.0, None) == queue
    assert DfsWeight().order(queue, 5.0, None) == queue


def test_lpm_aging_lets_a_cold_request_overtake_hot_ones():
    """With aging, a cold request that waited long enough passes fresh hot requests."""
    cold, hot = seq("cold", enqueue_time=0.0), seq("hot", enqueue_time=99.0)
    view = FakeView({"hot": 160})
    assert ids(LongestPrefixMatch().order([cold, hot], 100.0, view)) == ["hot", "cold"]
    aged = LongestPrefixMatch(aging=2.0)  # cold: 0 + 2 * 100 = 200 > hot: 160 + 2 * 1
    assert ids(aged.order([cold, hot], 100.0, view)) == ["cold", "hot"]


@pytest.mark.parametrize("kind", [HashedBlockCache, RadixCache])
def test_lpm_on_the_standalone_caches(kind):
    """On vLLM's hashed blocks and SGLang's radix tree alike, a request whose system prompt
    and first turn are cached beats one with only the system prompt cached, which beats the
    cold; two cold requests sharing a prefix are split by the in-batch check."""
    view = cached_after(kind, (SYSTEM, (20, 64)), (SYSTEM, (21, 16)))
    queue = [seq("cold", segments=((3, 100),)),
             seq("cold_twin", segments=((3, 100),)),
             seq("system", segments=(SYSTEM, (22, 64))),
             seq("turn", segments=(SYSTEM, (20, 64), (23, 30)))]
    assert [view.match(s) for s in queue] == [0, 0, 64, 128]
    assert ids(LongestPrefixMatch().order(queue, 0.0, view)) == [
        "turn", "system", "cold", "cold_twin"]
    assert ids(LongestPrefixMatch().order(queue[::-1], 0.0, view)) == [
        "turn", "system", "cold_twin", "cold"]


# -- dfs-weight --------------------------------------------------------------------------


def test_dfs_weight_walks_the_heaviest_subtree_first_node_requests_after_children():
    """Requests group by where their cached prefix ends: the heaviest subtree first, deeper
    requests before those at the node above, equal weights in queue order, uncached last."""
    queue = [seq("d1"),                                               # nothing cached
             seq("c1", segments=((2, 64), (30, 64))),
             seq("a1", segments=(SYSTEM, (10, 64))),
             seq("b1", segments=(SYSTEM, (20, 64))),
             seq("c2", segments=((2, 64), (31, 64))),
             seq("a2", segments=(SYSTEM, (11, 64))),
             seq("e1", segments=((4, 64),)),
             seq("a3", segments=(SYSTEM, (12, 64)))]
    view = FakeView({"c1": 64, "c2": 64, "a1": 64, "a2": 64, "a3": 64, "b1": 96, "e1": 48})
    # Tree: SYSTEM (a1 a2 a3; child b1) weight 4; segment 2 (c1 c2) weight 2; e1 weight 1.
    assert ids(DfsWeight().order(queue, 0.0, view)) == [
        "b1", "a1", "a2", "a3", "c1", "c2", "e1", "d1"]


def test_dfs_weight_splits_where_cached_paths_diverge_inside_a_segment():
    """Two requests whose segments agree for part of a run share that node: a longer match
    along the same path is the deeper node, and is served first."""
    shallow = seq("shallow", segments=((5, 200),))
    deep = seq("deep", segments=((5, 200),))
    sibling = seq("sibling", segments=((5, 100), (6, 100)))
    view = FakeView({"shallow": 96, "deep": 160, "sibling": 112})
    # shallow ends at 96 on the shared run; below it deep (5 to 160) and sibling (6 from 100)
    # branch apart, one request each: the first in queue order goes first.
    assert ids(DfsWeight().order([shallow, sibling, deep], 0.0, view)) == [
        "sibling", "deep", "shallow"]
    assert ids(DfsWeight().order([deep, shallow, sibling], 0.0, view)) == [
        "deep", "sibling", "shallow"]


@pytest.mark.parametrize("kind", [HashedBlockCache, RadixCache])
def test_dfs_weight_on_the_standalone_caches(kind):
    """On a real cache the group with more waiting requests goes first, together."""
    view = cached_after(kind, (SYSTEM, (20, 16)), ((2, 32), (21, 16)))
    queue = [seq("x1", segments=((2, 32), (30, 40))),
             seq("s1", segments=(SYSTEM, (31, 40))),
             seq("cold", segments=((9, 40),)),
             seq("s2", segments=(SYSTEM, (32, 40))),
             seq("x2", segments=((2, 32), (33, 40))),
             seq("s3", segments=(SYSTEM, (34, 40)))]
    assert ids(DfsWeight().order(queue, 0.0, view)) == ["s1", "s2", "s3", "x1", "x2", "cold"]


def test_dfs_weight_handles_a_deep_chain_of_turns():
    """Nested turns (each prompt extends the last) are ordered deepest first, without
    recursion: a chain 400 deep orders with the stack limited to 150 frames."""
    turns = [seq(f"t{k}", prompt_len=20 * k + 30, segments=tuple((100 + j, 16)
             for j in range(k + 1))) for k in range(400)]
    view = FakeView({f"t{k}": 16 * (k + 1) for k in range(400)})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 150)
    try:
        order = DfsWeight().order(turns, 0.0, view)
    finally:
        sys.setrecursionlimit(limit)
    assert ids(order) == [f"t{k}" for k in reversed(range(400))]


# -- hrrn --------------------------------------------------------------------------------


def test_hrrn_lets_an_old_long_request_overtake_young_short_ones():
    """Fresh short prompts beat a long one at first; once the long one has waited long
    enough, (wait + service) / service puts it ahead of younger short ones."""
    long = seq("long", prompt_len=1000, enqueue_time=0.0, index=0)
    shorts = [seq(f"s{i}", prompt_len=100, enqueue_time=10.0, index=1 + i) for i in range(3)]
    policy = HighestResponseRatio()
    # at 20: long 20/1000 = 0.02 < shorts 10/100 = 0.1
    assert ids(policy.order([long, *shorts], 20.0, None)) == ["s0", "s1", "s2", "long"]
    young = [seq(f"y{i}", prompt_len=100, enqueue_time=190.0, index=4 + i) for i in range(3)]
    # at 200: long 0.2 > young 0.1
    assert ids(policy.order([*young, long], 200.0, None)) == ["long", "y0", "y1", "y2"]


def test_hrrn_counts_only_the_uncached_prompt_as_service():
    """A long prompt that is mostly cached is short work: it goes before a shorter cold one;
    requests that have not waited tie, by entry time then arrival order."""
    cached_long = seq("cached_long", prompt_len=1000, enqueue_time=5.0, index=1)
    cold_short = seq("cold_short", prompt_len=300, enqueue_time=5.0, index=2)
    view = FakeView({"cached_long": 992})
    assert ids(HighestResponseRatio().order([cold_short, cached_long], 10.0, view)) == [
        "cached_long", "cold_short"]
    assert ids(HighestResponseRatio().order([cold_short, cached_long], 5.0, view)) == [
        "cached_long", "cold_short"]


# -- the dynamic waiting queue -----------------------------------------------------------


def test_dynamic_queue_keeps_entry_order_until_reordered_and_the_order_after():
    """Under a dynamic policy the queue is in entry order, reorder re-ranks it, the new
    order stands (ties keep it) and newcomers join at the tail; preempted requests stay
    ahead; peek, second, pop, iteration and queued_tokens follow."""
    queue = WaitingQueue(LongestPrefixMatch())
    assert queue.dynamic and not WaitingQueue(make_policy("fcfs")).dynamic
    a, b, c = seq("a", prompt_len=100), seq("b", prompt_len=200), seq("c", prompt_len=300)
    for s in (a, b, c):
        queue.push(s, 1.0)
    assert ids(queue) == ["a", "b", "c"] and queue.queued_tokens == 600
    queue.reorder(2.0, FakeView({"c": 64, "b": 32}))
    assert ids(queue) == ["c", "b", "a"]
    d = seq("d", prompt_len=50)
    queue.push(d, 3.0)
    queue.reorder(3.0, FakeView())  # c, b, a, d all tie: the last order stands
    assert ids(queue) == ["c", "b", "a", "d"]
    victim = seq("victim", prompt_len=10)
    victim.state = SeqState.PREEMPTED
    queue.push_front(victim)
    assert queue.peek() is victim and queue.second() is c
    assert [queue.pop() for _ in range(2)] == [victim, c]
    assert queue.peek() is b and queue.second() is a and queue.queued_tokens == 350
    assert ids([queue.pop() for _ in range(3)]) == ["b", "a", "d"]
    assert len(queue) == 0 and queue.queued_tokens == 0 and queue.peek() is None


def test_a_dynamic_policy_that_loses_a_request_is_refused():
    """reorder checks that the policy returned the same requests."""

    class Drops:
        def order(self, seqs, now, view):
            return seqs[1:]

    queue = WaitingQueue(Drops())
    for name in "ab":
        queue.push(seq(name), 0.0)
    with pytest.raises(ValueError, match="returned 1 requests for 2 waiting"):
        queue.reorder(0.0, None)


segment_lists = st.lists(st.tuples(st.integers(1, 4), st.sampled_from([16, 32, 40])),
                         max_size=3)
operations = st.lists(st.one_of(
    st.tuples(st.just("push"), segment_lists, st.integers(0, 160)),
    st.tuples(st.just("front"), st.just(()), st.just(0)),
    st.tuples(st.just("pop"), st.just(()), st.just(0)),
    st.tuples(st.just("reorder"), st.just(()), st.integers(0, 1))), max_size=40)


@settings(max_examples=150, deadline=None)
@given(operations, st.sampled_from(["lpm", "dfs-weight", "hrrn", "fcfs", "spf", "lof"]))
def test_reorder_never_loses_or_duplicates_and_static_queues_ignore_it(ops, name):
    """Any mix of push, preemption, pop and reorder: the queue holds exactly what was pushed
    and not popped, once each, with the right queued_tokens; a static policy's pop order is
    the same whether reorder is called or not."""
    queue, plain = WaitingQueue(make_policy(name)), WaitingQueue(make_policy(name))
    hits: dict[str, int] = {}
    held: dict[int, Seq] = {}
    popped, popped_plain = [], []
    for step, (op, segments, hit) in enumerate(ops):
        if op == "push":
            s = seq(f"r{step}", prompt_len=130 + hit, segments=tuple(segments), index=step,
                    enqueue_time=float(step))
            hits[s.request.request_id] = hit // BLOCK * BLOCK
            held[id(s)] = s
            queue.push(s, float(step))
            plain.push(s, float(step))
        elif op == "front":  # a preempted request, back on top
            s = seq(f"v{step}", prompt_len=30, index=step)
            s.state, s.generated = SeqState.PREEMPTED, 5
            held[id(s)] = s
            queue.push_front(s)
            plain.push_front(s)
        elif op == "pop" and len(queue):
            s = queue.pop()
            popped.append(s)
            popped_plain.append(plain.pop())
            held.pop(id(s))
        elif op == "reorder":
            queue.reorder(float(step), FakeView(hits) if hit else None)
        inside = list(queue)
        assert len(inside) == len({id(s) for s in inside}) == len(queue) == len(held)
        assert {id(s) for s in inside} == set(held)
        assert queue.queued_tokens == sum(s.prompt_len + s.generated for s in inside)
    if not queue.dynamic:
        assert popped == popped_plain


# -- through the library and the command line -------------------------------------------


def test_without_prefix_caching_lpm_and_dfs_weight_run_as_fcfs():
    """A run under lpm or dfs-weight with no cache gives fcfs's records."""
    requests = [Request(f"r{i}", i % 3, 30 + 17 * i % 90, 4 + i % 5,
                        prefix=Prefix(((1, 20),))) for i in range(12)]
    engine = EngineConfig(max_num_batched_tokens=128, num_blocks=40, block_size=BLOCK)
    fcfs = simulate(requests, engine, make_policy("fcfs"))
    for name in ("lpm", "dfs-weight"):
        other = simulate(requests, engine, make_policy(name))
        assert [(r.request_id, r.first_token_time, r.finish_time) for r in other.requests] == [
            (r.request_id, r.first_token_time, r.finish_time) for r in fcfs.requests]


def test_make_policy_builds_the_cache_aware_policies_and_checks_their_parameters():
    """make_policy knows lpm, dfs-weight and hrrn with SGLang's defaults, and refuses bad
    thresholds with a message naming the parameter."""
    assert make_policy("lpm") == LongestPrefixMatch(32, 32, 128, 0.0)
    assert make_policy("hrrn", fcfs_above=64).fcfs_above == 64
    assert isinstance(make_policy("dfs-weight"), DfsWeight)
    with pytest.raises(ValueError, match="fcfs_above must be an integer >= 0"):
        make_policy("lpm", fcfs_above=-1)
    with pytest.raises(ValueError, match="check_threshold must be an integer >= -1"):
        make_policy("hrrn", check_threshold=2.5)
    with pytest.raises(ValueError, match="has no parameter 'aging'"):
        make_policy("dfs-weight", aging=1.0)


def test_a_users_dynamic_policy_loads_by_name(tmp_path, monkeypatch):
    """A user's class with only an order method is a policy, and its queue is dynamic."""
    (tmp_path / "kvsched_test_dynamic.py").write_text(textwrap.dedent('''
        class Reverse:
            """Newest first, every step."""

            def order(self, seqs, now, view):
                return seqs[::-1]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        queue = WaitingQueue(make_policy("kvsched_test_dynamic:Reverse"))
    finally:
        sys.modules.pop("kvsched_test_dynamic", None)
    for name in "abc":
        queue.push(seq(name), 0.0)
    queue.reorder(1.0, None)
    assert queue.dynamic and ids(queue) == ["c", "b", "a"]


def test_cli_lists_them_and_refuses_a_bad_threshold_in_one_line(tmp_path):
    """`kvsched policies` lists lpm, dfs-weight and hrrn; a negative threshold in a scenario
    is one error line naming the file and the field, exit 2."""
    listing = CliRunner().invoke(app, ["policies"])
    assert listing.exit_code == 0
    for name in ("lpm", "dfs-weight", "hrrn"):
        assert any(line.startswith(name) for line in listing.stdout.splitlines())
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nworkload: {kind: inline, requests: [{prompt_len: 10, "
                    "output_len: 2}]}\npolicy: {name: lpm, fcfs_above: -3}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad.yaml" in lines[0] and "fcfs_above" in lines[0], lines
