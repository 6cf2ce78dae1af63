"""SGLang's radix cache kept with piece tuples on its edges, as kvsched kept it until its edges
became token ranges of a chain: the oracle that tests/test_kvcache_runs.py holds
`kvsched.kvcache.RadixCache` to. Pages as SGLang keeps them: a child is found by its first
page's pieces and a match counts whole pages (the tokens compared one by one, then rounded
down), so a sequence leaving an edge inside a page branches at the page's start.

SGLang's radix cache (`python/sglang/srt/mem_cache/radix_cache.py`), over token segments.

The tree holds computed token sequences; a node's edge is a run of tokens (pieces of
segments). A request matching a prefix locks the path to its last matched node while it
runs; its own new tokens are private until inserted (`commit`, as SGLang's
`cache_unfinished_req` / `cache_finished_req`: tokens already in the tree are duplicates
and go back to the free pool). When a new allocation needs room, unlocked leaves are
evicted least recently used first. Hits are counted in tokens, at page (block)
granularity, at most `num_tokens - 1`.

The tokens unlocked nodes hold (what eviction could free) are counted as locks change, and
evictable leaves wait in a heap by last access (stale entries skipped when popped), so the
free count is O(1) and an eviction costs O(log leaves) per leaf, never a walk of the tree.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import count

from kvsched.prefix import Prefix

Piece = tuple[int, int, int]  # (segment id, start, end)


class _Node:
    __slots__ = ("key", "parent", "children", "lock", "last_access", "num_tokens")

    def __init__(self, key: tuple[Piece, ...], parent: _Node | None) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[tuple[Piece, ...], _Node] = {}
        self.lock = 0
        self.last_access = 0
        self.num_tokens = sum(end - start for _, start, end in key)


def _tokens(pieces: Sequence[Piece]) -> Iterator[tuple[int, int]]:
    for seg, start, end in pieces:
        for offset in range(start, end):
            yield seg, offset


def _shared(edge: Sequence[Piece], query: Sequence[Piece]) -> int:
    """Tokens `edge` and `query` share from their starts, compared one by one."""
    shared = 0
    for a, b in zip(_tokens(edge), _tokens(query), strict=False):
        if a != b:
            break
        shared += 1
    return shared


def _split_pieces(key: tuple[Piece, ...], tokens: int) -> tuple[tuple[Piece, ...],
                                                                 tuple[Piece, ...]]:
    head: list[Piece] = []
    tail: list[Piece] = []
    left = tokens
    for seg, start, end in key:
        if left <= 0:
            tail.append((seg, start, end))
        elif end - start <= left:
            head.append((seg, start, end))
            left -= end - start
        else:
            head.append((seg, start, start + left))
            tail.append((seg, start + left, end))
            left = 0
    return tuple(head), tuple(tail)


class RadixCache:
    """`KVCache` with SGLang's radix tree; capacity `num_blocks * block_size` tokens."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity = num_blocks * block_size
        self.root = _Node((), None)
        self.root.lock = 1  # never evicted
        self.tree_tokens = 0
        self._private: dict[int, int] = {}  # owner -> tokens allocated, not in the tree
        self._private_total = 0
        self._node: dict[int, _Node] = {}  # owner -> the node its path is locked to
        self._prefix: dict[int, Prefix | None] = {}
        self._inserted: dict[int, int] = {}  # owner -> its tokens that the tree holds
        self._clock = count(1)
        self.evicted = 0  # tokens evicted so far
        self._evictable = 0  # tokens held by unlocked nodes
        self._heap: list[tuple[int, int, _Node]] = []  # (last access, tie, leaf) candidates
        self._tie = count()

    # -- sizes ---------------------------------------------------------------------------

    @property
    def free_tokens(self) -> int:
        return self.capacity - self.tree_tokens - self._private_tokens

    @property
    def _private_tokens(self) -> int:
        return self._private_total

    def evictable_tokens(self) -> int:
        return self._evictable

    @property
    def num_free(self) -> int:
        return (self.free_tokens + self.evictable_tokens()) // self.block_size

    @property
    def num_cached(self) -> int:
        return self.tree_tokens // self.block_size

    @property
    def evicted_blocks(self) -> int:
        return self.evicted // self.block_size

    # -- the tree ------------------------------------------------------------------------

    def _page(self, pieces: Sequence[Piece]) -> tuple[Piece, ...]:
        return _split_pieces(tuple(pieces), self.block_size)[0]

    def _path(self, pieces: list[Piece]) -> Iterator[tuple[_Node, int]]:
        """The nodes matching `pieces` from the root, each with the tokens it matches in
        whole pages (only the last may match part of its edge). Reads the tree, changes
        nothing."""
        page = self.block_size
        node, rest = self.root, tuple(pieces)
        while sum(end - start for _, start, end in rest) >= page:
            child = node.children.get(self._page(rest))
            if child is None:
                return
            shared = _shared(child.key, rest) // page * page
            if not shared:
                return
            yield child, shared
            if shared < child.num_tokens:
                return
            node = child
            rest = _split_pieces(rest, shared)[1]

    def _walk(self, pieces: list[Piece], split: bool) -> tuple[_Node, int]:
        """The deepest node matching `pieces` from the root and the tokens matched; with
        `split`, a match ending inside an edge splits it there (SGLang's match_prefix)."""
        node, matched = self.root, 0
        now = next(self._clock)
        for child, shared in self._path(pieces):
            child.last_access = now
            if not child.lock and not child.children:
                self._candidate(child)
            matched += shared
            if shared < child.num_tokens:
                if split:
                    node = self._split(child, shared)
                break
            node = child
        return node, matched

    def _split(self, child: _Node, tokens: int) -> _Node:
        head, tail = _split_pieces(child.key, tokens)
        parent = child.parent
        assert parent is not None
        middle = _Node(head, parent)
        middle.lock = child.lock
        middle.last_access = child.last_access
        parent.children[self._page(head)] = middle
        child.key = tail
        child.num_tokens -= middle.num_tokens
        child.parent = middle
        middle.children[self._page(tail)] = child
        if not child.lock:  # the tail leaf keeps its place in the heap under a new key
            self._candidate(child)
        return middle

    def _pieces(self, prefix: Prefix, num_tokens: int) -> list[Piece]:
        return list(prefix.pieces(num_tokens))

    def _lock(self, node: _Node, delta: int) -> None:
        walk: _Node | None = node
        while walk is not None and walk is not self.root:
            before = walk.lock
            walk.lock += delta
            assert walk.lock >= 0
            if not before:
                self._evictable -= walk.num_tokens
            elif not walk.lock:
                self._evictable += walk.num_tokens
                if not walk.children:
                    self._candidate(walk)
            walk = walk.parent

    def _candidate(self, leaf: _Node) -> None:
        heapq.heappush(self._heap, (leaf.last_access, next(self._tie), leaf))

    def _insert(self, pieces: list[Piece]) -> int:
        """Insert a sequence; the tokens that were already in the tree."""
        total = sum(end - start for _, start, end in pieces)
        pieces = list(_split_pieces(tuple(pieces), total - total % self.block_size)[0])
        total -= total % self.block_size
        node, matched = self._walk(list(pieces), split=True)
        if matched < total:
            _, rest = _split_pieces(tuple(pieces), matched)
            leaf = _Node(rest, node)
            leaf.last_access = next(self._clock)
            node.children[self._page(rest)] = leaf
            self.tree_tokens += leaf.num_tokens
            self._evictable += leaf.num_tokens
            self._candidate(leaf)
        return matched

    def _evict(self, tokens: int) -> None:
        """Free at least `tokens` by removing unlocked leaves, least recently used first."""
        heap = self._heap
        freed = 0
        while freed < tokens and heap:
            access, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            if (parent is None or leaf.lock or leaf.children or access != leaf.last_access
                    or parent.children.get(self._page(leaf.key)) is not leaf):
                continue  # stale: locked, grown, touched since, or already gone
            del parent.children[self._page(leaf.key)]
            leaf.parent = None
            self.tree_tokens -= leaf.num_tokens
            self._evictable -= leaf.num_tokens
            freed += leaf.num_tokens
            self.evicted += leaf.num_tokens
            if parent is not self.root and not parent.children and not parent.lock:
                self._candidate(parent)

    def _leaves(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node is not self.root:
                out.append(node)
        return out

    # -- the protocol ----------------------------------------------------------------------

    def match(self, prefix: Prefix | None, num_tokens: int) -> int:
        if prefix is None or num_tokens <= 1:
            return 0
        _, matched = self._walk(self._pieces(prefix, num_tokens - 1), split=False)
        return matched // self.block_size * self.block_size

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        # The hit's path is locked before anything is evicted: it cannot make room.
        return num_new * self.block_size <= (self.free_tokens + self.evictable_tokens()
                                             - self._unlocked_on_path(prefix, hit_tokens))

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Free blocks taking the hit costs: its tokens that no running request locks."""
        unlocked = self._unlocked_on_path(prefix, hit_tokens)
        free = self.free_tokens + self._evictable
        return free // self.block_size - (free - unlocked) // self.block_size

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks (taken this step, holding nothing)."""
        self._private[owner] -= num_blocks * self.block_size
        self._private_total -= num_blocks * self.block_size

    def _unlocked_on_path(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Tokens of the first `hit_tokens` of `prefix` held by unlocked nodes."""
        if prefix is None or hit_tokens <= 0:
            return 0
        return sum(shared for node, shared in self._path(self._pieces(prefix, hit_tokens))
                   if not node.lock)

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        need = num_new * self.block_size
        if owner not in self._private:
            node = self.root
            if prefix is not None and hit_tokens > 0:
                node, matched = self._walk(self._pieces(prefix, hit_tokens), split=True)
                if matched != hit_tokens:
                    raise ValueError(f"owner {owner}: {hit_tokens} hit tokens are not cached")
            self._lock(node, +1)
            self._node[owner] = node
            self._prefix[owner] = prefix
            self._inserted[owner] = hit_tokens
            self._private[owner] = 0
        if need > self.free_tokens:
            self._evict(need - self.free_tokens)
        if need > self.free_tokens:
            raise ValueError(f"owner {owner}: {num_new} new blocks do not fit")
        self._private[owner] += need
        self._private_total += need

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int) -> None:
        if prefix is None or owner not in self._private:
            return
        tokens = num_tokens // self.block_size * self.block_size
        if tokens <= self._inserted[owner]:
            return
        before = self.tree_tokens
        self._insert(self._pieces(prefix, tokens))
        added = self.tree_tokens - before
        dup = tokens - self._inserted[owner] - added  # computed twice: back to the pool
        back = min(self._private[owner], added + dup)
        self._private[owner] -= back
        self._private_total -= back
        node, _ = self._walk(self._pieces(prefix, tokens), split=True)
        self._lock(node, +1)
        self._lock(self._node[owner], -1)
        self._node[owner] = node
        self._inserted[owner] = tokens

    def free(self, owner: int) -> None:
        if owner not in self._private:
            return
        self._lock(self._node.pop(owner), -1)
        self._private_total -= self._private.pop(owner)
        self._prefix.pop(owner, None)
        self._inserted.pop(owner, None)

    def blocks_of(self, owner: int) -> Sequence[int]:
        held = self._inserted.get(owner, 0) + self._private.get(owner, 0)
        return range(held // self.block_size)

    def check(self) -> None:
        """Invariants (for tests): tokens conserved, locks consistent."""
        assert 0 <= self.free_tokens <= self.capacity
        total = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            total += node.num_tokens
            for child in node.children.values():
                assert child.parent is node and child.lock <= node.lock or node is self.root
                stack.append(child)
        assert total == self.tree_tokens
        assert self._private_total == sum(self._private.values())
        unlocked = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root and not node.lock:
                unlocked += node.num_tokens
            stack.extend(node.children.values())
        assert unlocked == self._evictable, (unlocked, self._evictable)
