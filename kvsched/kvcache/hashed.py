"""vLLM V1's prefix cache (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`), on runs of blocks.

The rules (conformance/RULES.md P1-P7, read from vLLM 0.33 and checked against it): a full
block is identified by its parent's hash and its tokens. The free queue is always [free
blocks without a hash][free cached blocks, least recently freed first]: a freed block without
a hash goes to the front and is reused first, a cached one to the back; a new block is popped
from the front, so a cached block is evicted (its hash forgotten) only once no uncached block
is free. A request frees its blocks tail first, so its last blocks are evicted before its
first ones. A hit is the longest run of cached full blocks from the start, at most
`num_tokens - 1` tokens. Blocks shared by running requests are held once, with a reference
count; blocks are not de-duplicated (two requests computing the same block cache both
copies, and a lookup takes the first cached).

How it is kept, so that the work is per run of blocks, never per block: a block is cached
only while the block before it is (a request takes, holds and frees its blocks as a prefix,
tail first), so the cached blocks form a tree over the requests' segment chains, a node per
run of block positions that the same requests hold (`_Node`). A node's `copies` are the
physical runs holding its positions, oldest first (more than one only when two requests
computed the same blocks); a copy is held by its owners or waits, whole, in the free queue of
cached blocks (a linked list of copies; a copy there stands for its blocks tail first). Nodes
split where a hit, a divergence or an eviction ends inside them; a request's own blocks
extend its leaf in place as it commits them. Blocks without a hash are counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvsched.prefix import Prefix, common_prefix

if TYPE_CHECKING:
    from kvsched.kvcache.offload import HostTier


class _Node:
    """Block positions `start` .. `end - 1` along the path from the root; `chain` is a prefix
    that agrees with that path through `end`; `key` is the first block's key in the parent's
    `children`. `grower`: the owner that extends it in place (see `_Owner.leaf`), else None."""

    __slots__ = ("parent", "key", "chain", "start", "end", "children", "copies", "grower")

    def __init__(self, parent: _Node | None, key: tuple, chain: Prefix | None, start: int,
                 end: int) -> None:
        self.parent = parent
        self.key = key
        self.chain = chain
        self.start = start
        self.end = end
        self.children: dict[tuple, _Node] = {}
        self.copies: list[_Copy] = []
        self.grower: _Owner | None = None


class _Copy:
    """One physical run of blocks holding a node's positions: held by `owners` (its reference
    count), or, with none, in the free queue between `prev` and `next`."""

    __slots__ = ("node", "owners", "prev", "next")

    def __init__(self, node: _Node | None, owners: list[_Owner]) -> None:
        self.node = node
        self.owners = owners
        # Out of the free queue: _DETACHED, not itself (a copy that pointed at itself would
        # be a cycle, which only the garbage collector frees: R1 left 38k of them)
        self.prev: _Copy = _DETACHED
        self.next: _Copy = _DETACHED


class _Owner:
    """A request's blocks: `copies` cover its first `covered` positions, then `tail` blocks
    without a hash; `committed` is how many leading blocks it has committed (as vLLM counts
    them: it may pass `covered` at a block no hash covers).

    `leaf`: the node of its last copy while that node is its own leaf (a node with no
    children, one copy, held by it alone), which its next commit extends in place (most
    commits: a decode's block of private tokens); valid while `leaf.grower is self`: a
    second copy or owner clears it. Asked as one pointer compare, not a walk over the node,
    its copies and their owners (a commit's cost was those reads, out of the CPU's caches).
    `chain`, `chain_blocks`: the prefix of its last commit and its full blocks."""

    __slots__ = ("copies", "covered", "tail", "committed", "leaf", "chain", "chain_blocks")

    def __init__(self) -> None:
        self.copies: list[_Copy] = []
        self.covered = 0
        self.tail = 0
        self.committed = 0
        self.leaf: _Node | None = None
        self.chain: Prefix | None = None
        self.chain_blocks = 0

    def let_go(self) -> None:
        """It no longer extends `leaf` in place (its last copy changes or is shared)."""
        leaf = self.leaf
        if leaf is not None:
            if leaf.grower is self:
                leaf.grower = None
            self.leaf = None


_DETACHED = _Copy.__new__(_Copy)
"""What a copy out of the free queue links to (one object, a cycle of its own)."""
_DETACHED.node, _DETACHED.owners = None, []
_DETACHED.prev = _DETACHED.next = _DETACHED


def _idle(path: list[tuple[_Node, int]]) -> int:
    """Blocks of a hit along `path` (`HashedBlockCache._path`) that no one holds."""
    idle, start = 0, 0
    for node, end in path:
        if not node.copies[0].owners:
            idle += end - start
        start = end
    return idle


def _size(copy: _Copy) -> int:
    node = copy.node
    assert node is not None
    return node.end - node.start


class HashedBlockCache:
    """`KVCache` with vLLM's hashed blocks and free queue."""

    # vLLM hashes a block of generated tokens in the step that fills it and keeps a
    # preempted request's blocks cached (RULES.md P4, P7)
    commits_running = True

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.root = _Node(None, (), None, 0, 0)
        self._uncached_free = num_blocks
        self._lru = _Copy(None, [])  # the free queue's sentinel: next is evicted first
        self._lru.prev = self._lru.next = self._lru
        self._lru_blocks = 0
        self.cached = 0  # blocks holding a hash (in use or free)
        # owner id -> its blocks (None: holds none); ids are requests' indices, small and
        # dense: a list slot, not a dict lookup (whose key compare read a cold int object)
        self._owners: list[_Owner | None] = []
        self.evicted = 0  # cached blocks evicted so far
        # a host tier (`kvsched.kvcache.offload.HostTier`) evicted blocks go to
        self.spill: HostTier | None = None

    @property
    def num_free(self) -> int:
        return self.blocks_free()

    def blocks_free(self) -> int:
        """`num_free` as the compiled tracker reads it: a C call, not a Python property."""
        return self._uncached_free + self._lru_blocks

    @property
    def num_cached(self) -> int:
        return self.cached

    @property
    def evicted_blocks(self) -> int:
        return self.evicted

    # -- owners ---------------------------------------------------------------------------

    def _held(self, owner: int) -> _Owner | None:
        """`owner`'s blocks, None while it holds none."""
        owners = self._owners
        return owners[owner] if 0 <= owner < len(owners) else None

    def _holder(self, owner: int) -> _Owner:
        """`owner`'s blocks, which it must hold."""
        held = self._held(owner)
        if held is None:
            raise KeyError(owner)
        return held

    def _adopt(self, owner: int) -> _Owner:
        """A new entry for `owner`, which holds nothing yet."""
        if owner < 0:
            raise ValueError(f"owner {owner}: owner ids are >= 0")
        owners = self._owners
        if owner >= len(owners):
            owners.extend([None] * (owner + 1 - len(owners)))
        held = owners[owner] = _Owner()
        return held

    # -- the tree ------------------------------------------------------------------------

    def _path(self, prefix: Prefix, limit: int) -> list[tuple[_Node, int]]:
        """The nodes holding `prefix`'s first cached blocks (at most `limit`), each with the
        position its match ends at (the last may end inside it)."""
        out: list[tuple[_Node, int]] = []
        node, position, size = self.root, 0, self.block_size
        segments = prefix.segments
        limit = min(limit, prefix.num_tokens // size)  # (its full blocks only)
        while position < limit:
            child = node.children.get(prefix.block_key(size, position))
            if child is None:
                break
            chain = child.chain
            assert chain is not None and child.start == position
            end = child.end
            if chain is not prefix:
                end = min(end, common_prefix(chain.segments, segments) // size)
            if end > limit:
                end = limit
            out.append((child, end))
            if end < child.end:
                break
            node, position = child, end
        return out

    def _split(self, node: _Node, position: int) -> _Node:
        """Cut `node` at `position`: returns the new upper node; `node` keeps the rest. Each
        copy is cut in two: its owners hold both halves, and a free one keeps its place in
        the free queue (its upper half right behind it: a copy's tail is evicted first)."""
        parent = node.parent
        chain = node.chain
        assert parent is not None and chain is not None and node.start < position < node.end
        upper = _Node(parent, node.key, chain, node.start, position)
        parent.children[node.key] = upper
        node.start = position
        node.key = chain.block_key(self.block_size, position)
        node.parent = upper
        upper.children[node.key] = node
        for copy in node.copies:
            half = _Copy(upper, list(copy.owners))
            upper.copies.append(half)
            if copy.owners:
                for owner in copy.owners:
                    held = owner.copies
                    held.insert(held.index(copy), half)
            else:  # behind the lower half
                after = copy.next
                half.prev, half.next = copy, after
                copy.next = after.prev = half
        return upper

    def _free_copy(self, copy: _Copy) -> None:
        """A copy nobody holds joins the back of the free queue."""
        last = self._lru.prev
        copy.prev, copy.next = last, self._lru
        last.next = self._lru.prev = copy
        self._lru_blocks += _size(copy)

    def _take_copy(self, copy: _Copy) -> None:
        """A free copy leaves the free queue (touched by a hit, or evicted)."""
        copy.prev.next = copy.next
        copy.next.prev = copy.prev
        copy.prev = copy.next = _DETACHED
        self._lru_blocks -= _size(copy)

    def _evict(self, num_blocks: int) -> None:
        """Pop `num_blocks` cached blocks from the front of the free queue: each copy's
        blocks tail first; their hashes are forgotten."""
        left = num_blocks
        while left:
            copy = self._lru.next
            node = copy.node
            assert node is not None and node.parent is not None, "eviction past the free queue"
            size = node.end - node.start
            if size > left:
                if len(node.copies) == 1 and not node.children:  # a lone leaf: shorten it
                    if self.spill is not None:
                        self.spill.put(node.chain, node.end - left, node.end)
                    node.end -= left
                    self._lru_blocks -= left
                    break
                self._split(node, node.end - left)  # the copy keeps the evicted tail
                size = left
            self._take_copy(copy)
            if self.spill is not None:
                self.spill.put(node.chain, node.start, node.end)
            node.copies.remove(copy)
            copy.node = None
            if not node.copies:
                assert not node.children, "a cached block outlived its parent block"
                del node.parent.children[node.key]
                node.parent = None
            left -= size
        self.cached -= num_blocks
        self.evicted += num_blocks

    # -- lookups -------------------------------------------------------------------------

    def match(self, prefix: Prefix | None, num_tokens: int, whole: bool = False) -> int:
        """`whole`: every full block may hit, the last token's too (vLLM V0 counts them all,
        then computes the last token again); else at most `num_tokens - 1` tokens (V1)."""
        if prefix is None or num_tokens <= 1:
            return 0
        size = self.block_size
        path = self._path(prefix, (num_tokens if whole else num_tokens - 1) // size)
        return path[-1][1] * size if path else 0

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Hit blocks no one holds: taking them takes them out of the free queue."""
        if prefix is None or hit_tokens <= 0:
            return 0
        return _idle(self._path(prefix, hit_tokens // self.block_size))

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        return num_new <= self.num_free - self.idle_hits(prefix, hit_tokens)

    # -- an owner's blocks -----------------------------------------------------------------

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        held = self._held(owner)
        if hit_tokens <= 0 and held is not None:  # growth (most calls): fresh blocks only
            if num_new > self._uncached_free + self._lru_blocks:
                raise ValueError(f"owner {owner}: {num_new} new blocks, {self.num_free} free")
            fresh = min(num_new, self._uncached_free)
            self._uncached_free -= fresh
            if num_new > fresh:
                self._evict(num_new - fresh)
            held.tail += num_new
            return
        size = self.block_size
        path: list[tuple[_Node, int]] = []
        hit_blocks = 0
        if prefix is not None and hit_tokens > 0:
            path = self._path(prefix, hit_tokens // size)
            hit_blocks = path[-1][1] if path else 0
        if hit_blocks * size != max(0, hit_tokens):
            raise ValueError(f"owner {owner}: {hit_tokens} hit tokens are not cached")
        if num_new > self.num_free - _idle(path):  # (can_allocate, on the path at hand)
            raise ValueError(f"owner {owner}: {num_new} new blocks, {self.num_free} free")
        if held is None:
            held = self._adopt(owner)
        elif path and (held.covered or held.tail):
            raise ValueError(f"owner {owner}: hits only on a first allocation")
        if path:
            node, end = path[-1]
            if end < node.end:
                path[-1] = (self._split(node, end), end)
            held.let_go()
            copies = held.copies
            for node, _ in path:  # touch: a cached block in use leaves the free queue
                copy = node.copies[0]
                if not copy.owners:
                    self._take_copy(copy)
                copy.owners.append(held)
                node.grower = None  # shared now: no one's own leaf
                copies.append(copy)
            held.covered = held.committed = hit_blocks
        fresh = min(num_new, self._uncached_free)
        self._uncached_free -= fresh
        if num_new > fresh:  # evicted only now that the blocks are needed
            self._evict(num_new - fresh)
        held.tail += num_new

    def grow_each(self, owners: list[int]) -> None:
        """One fresh block for each of `owners` (which hold blocks already), taken at once:
        what `allocate(owner, None, 0, 1)` one owner after another takes."""
        self.take_fresh(len(owners))
        for owner in owners:
            self.grow_tail(owner)

    def take_fresh(self, num_new: int) -> None:
        """`grow_each`'s first half: `num_new` fresh blocks are taken (the compiled tracker
        calls the halves, without a list of owner ids)."""
        if num_new > self._uncached_free + self._lru_blocks:
            raise ValueError(f"{num_new} new blocks, {self.num_free} free")
        fresh = min(num_new, self._uncached_free)
        self._uncached_free -= fresh
        if num_new > fresh:
            self._evict(num_new - fresh)

    def grow_tail(self, owner: int) -> None:
        """`grow_each`'s second half, for one owner: its tail holds one of the blocks taken."""
        held = self._holder(owner)
        held.tail += 1

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int,
               prompt_tokens: int = 0) -> None:
        """(`prompt_tokens`: where a tree would split the path; blocks have no path.)"""
        if prefix is None:
            return
        held = self._held(owner)
        if held is None or not (held.covered or held.tail):
            return
        size = self.block_size
        full = min(num_tokens // size, held.covered + held.tail)
        done = held.committed
        if full <= done:
            return
        if prefix is not held.chain:
            held.chain = prefix
            held.chain_blocks = prefix.num_tokens // size
        top = min(full, held.chain_blocks)
        if top > done:
            assert done == held.covered
            self._attach(held, prefix, done, top)
            held.tail -= top - done
            held.covered = top
            self.cached += top - done
        held.committed = full

    def _attach(self, held: _Owner, prefix: Prefix, start: int, end: int) -> None:
        """`held`'s blocks `start` .. `end - 1`, uncached so far, now hold `prefix`'s hashes:
        new copies on the nodes that already hold them (after the older ones), and a new
        node beyond; its own leaf simply grows."""
        leaf = held.leaf
        if leaf is not None and leaf.grower is held:  # its own leaf, known: it grows in place
            leaf.end = end
            leaf.chain = prefix
            return
        held.let_go()
        copies = held.copies
        last = copies[-1] if copies else None  # (typed: its fields read as C values)
        parent = last.node if last is not None else self.root
        assert parent is not None and parent.end == start
        position, size = start, self.block_size
        while position < end:
            if (last is not None and parent.parent is not None and not parent.children
                    and len(parent.copies) == 1 and parent.copies[0] is last
                    and len(last.owners) == 1):
                parent.end = end  # its own leaf: it grows in place
                parent.chain = prefix
                held.leaf, parent.grower = parent, held
                return
            key = prefix.block_key(size, position)
            child = parent.children.get(key)
            if child is None:
                child = parent.children[key] = _Node(parent, key, prefix, position, end)
                copy = _Copy(child, [held])
                child.copies.append(copy)
                copies.append(copy)
                held.leaf, child.grower = child, held
                return
            chain = child.chain
            assert chain is not None
            stop = min(child.end, end, common_prefix(chain.segments, prefix.segments) // size)
            if stop < child.end:
                child = self._split(child, stop)
            copy = _Copy(child, [held])  # a second copy of these blocks: after the first
            child.grower = None
            child.copies.append(copy)
            copies.append(copy)
            last = copy
            position, parent = stop, child

    def free(self, owner: int) -> None:
        held = self._held(owner)
        if held is None:
            return
        self._owners[owner] = None
        held.let_go()
        self._uncached_free += held.tail  # the front: reused first
        for copy in reversed(held.copies):  # tail first
            copy.owners.remove(held)
            if not copy.owners:
                self._free_copy(copy)  # the back: evicted last among the cached

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks (taken this step, holding nothing)."""
        held = self._holder(owner)
        held.let_go()
        take = min(num_blocks, held.tail)
        held.tail -= take
        self._uncached_free += take
        left = num_blocks - take
        while left:
            copy = held.copies[-1]
            node = copy.node
            assert node is not None
            if node.end - node.start > left:
                self._split(node, node.end - left)
            held.copies.pop()
            held.covered -= node.end - node.start
            left -= node.end - node.start
            copy.owners.remove(held)
            if not copy.owners:
                self._free_copy(copy)
        held.committed = min(held.committed, held.covered + held.tail)

    def blocks_of(self, owner: int) -> Sequence[tuple[int, int]]:
        """Stable ids of `owner`'s blocks (equal ids: one shared block)."""
        held = self._held(owner)
        if held is None:
            return ()
        out: list[tuple[int, int]] = []
        for copy in held.copies:
            node = copy.node
            assert node is not None
            out.extend((id(copy), position) for position in range(node.start, node.end))
        out.extend((id(held), -1 - i) for i in range(held.tail))
        return tuple(out)

    def check(self) -> None:
        """Invariants (for tests): blocks conserved, copies held xor free, the tree sound."""
        cached = held_blocks = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            for key, child in node.children.items():
                assert child.parent is node and child.key == key and child.start == node.end
                assert child.copies and child.start < child.end
                stack.append(child)
            for copy in node.copies:
                assert copy.node is node
                cached += node.end - node.start
                if copy.owners:
                    held_blocks += node.end - node.start
            grower = node.grower
            if grower is not None:  # its own leaf: the last copy of its one owner
                assert grower.leaf is node and not node.children and len(node.copies) == 1
                assert node.copies[0].owners == [grower] and grower.copies[-1] is node.copies[0]
        assert cached == self.cached
        free, copy = 0, self._lru.next
        while copy is not self._lru:
            assert not copy.owners and copy.node is not None and copy.next.prev is copy
            free += _size(copy)
            copy = copy.next
        assert free == self._lru_blocks and self._uncached_free >= 0
        tails = 0
        for held in self._owners:
            if held is None:
                continue
            assert held.covered == sum(map(_size, held.copies))
            assert all(held in copy.owners for copy in held.copies)
            tails += held.tail
        assert held_blocks + tails + self.num_free == self.num_blocks, "a block leaked"
