"""SGLang's radix cache (`python/sglang/srt/mem_cache/radix_cache.py`), over token segments.

The tree holds computed token sequences; a node's edge is a run of tokens (pieces of
segments). A request matching a prefix locks the path to its last matched node while it
runs; its own new tokens are private until inserted (`commit`, as SGLang's
`cache_unfinished_req` / `cache_finished_req`: tokens already in the tree are duplicates
and go back to the free pool). When a new allocation needs room, unlocked leaves are
evicted least recently used first. Hits are counted in tokens, at most `num_tokens - 1`.

Pages (blocks) as SGLang keeps them with a page size above one: edges hold whole pages, a
child is found by its first page's tokens (`RadixKey.child_key`), and a match counts whole
pages only (`RadixKey.match` rounds down), so a sequence that leaves an edge inside a page
branches at that page's start and holds the page's shared tokens a second time under its
own first page (conformance/SGLANG_RULES.md S16).

The tokens unlocked nodes hold (what eviction could free) are counted as locks change, and
evictable leaves wait in a heap by last access (stale entries skipped when popped), so the
free count is O(1) and an eviction costs O(log leaves) per leaf, never a walk of the tree.

SGLang's scheduler allocates a prefill's KV chunk by chunk, for the whole batch at once after
the round (`prepare_for_extend`), and inserts what a step computed after its forward; the
scheduler here admits a whole prompt at once. `promise` keeps an admission's fresh blocks
aside without taking them, `computed` notes each chunk, and `materialize` takes the step's
chunks as SGLang's `alloc_for_extend` does, evicting first what they lack
(conformance/SGLANG_RULES.md S18).
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappop, heappush
from typing import TYPE_CHECKING

from kvsched.prefix import Prefix, block_key, common_prefix

if TYPE_CHECKING:
    from kvsched.kvcache.offload import HostTier


# An eviction candidate's heap key is last access * _TIE_SPAN + tie: below 2**63, a C integer in
# the compiled build, while ties (one per push, a run's pushes) stay below _TIE_SPAN and
# access times (one per walk) below _MAX_ACCESS, billions past what a run reaches
_TIE_SPAN = 1 << 32
_MAX_ACCESS = 1 << 31


class _Node:
    """An edge of tokens `start` .. `end - 1` (depths from the root) of `chain`, a prefix
    that agrees with the path to it; `key` names its first token in its parent's
    `children`."""

    __slots__ = ("chain", "start", "end", "key", "parent", "children", "lock", "last_access")

    def __init__(self, chain: Prefix | None, start: int, end: int, key: tuple[int, int],
                 parent: _Node | None) -> None:
        self.chain = chain
        self.start = start
        self.end = end
        self.key = key
        self.parent = parent
        self.children: dict[tuple[int, int], _Node] = {}
        self.lock = 0
        self.last_access = 0

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


class _Run:
    """What an owner (a request's run) holds: its path locked to `node`, on `prefix`'s path;
    `inserted` tokens that the tree holds, `private` ones allocated but not in the tree,
    `promised` ones admitted but not yet taken; `done`: its tokens with KV (hit + chunks
    noted). One record per owner, not a dict per count: a step reads them all."""

    __slots__ = ("node", "prefix", "inserted", "private", "promised", "done")

    def __init__(self, node: _Node, prefix: Prefix | None, hit_tokens: int) -> None:
        self.node = node
        self.prefix = prefix
        self.inserted = hit_tokens
        self.private = 0
        self.promised = 0
        self.done = hit_tokens


def _agreement(node: _Node, prefix: Prefix, limit: int, page: int) -> int:
    """How far (in depth, at most `limit`, in whole pages) `prefix` follows `node`'s edge."""
    chain = node.chain
    assert chain is not None
    end = min(node.end, limit)
    if chain is not prefix:
        end = min(end, common_prefix(chain.segments, prefix.segments))
    return end - end % page  # (edges start on a page boundary)


class RadixCache:
    """`KVCache` with SGLang's radix tree; capacity `num_blocks * block_size` tokens."""

    # SGLang inserts decoded tokens when the request finishes, and a retraction frees them
    # without inserting them
    commits_running = False

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.capacity = num_blocks * block_size
        self.root = _Node(None, 0, 0, (0, 0), None)
        self.root.lock = 1  # never evicted
        self.tree_tokens = 0
        self._runs: dict[int, _Run] = {}  # owner -> what it holds
        self._private_total = 0  # tokens allocated, not in the tree (every run's)
        self._promised_total = 0  # tokens admitted but not yet taken
        self._chunks: list[tuple[int, int, int]] = []  # (owner, extend, tokens) to take
        self._grown: list[int] = []  # owners promised a block by the decode pass under way
        self._clock = 0  # the last access time given (each walk takes the next)
        self.evicted = 0  # tokens evicted so far
        self._evictable = 0  # tokens held by unlocked nodes
        # Eviction candidates: a heap of keys, last access * _TIE_SPAN + tie (one integer
        # compares faster than a (last access, tie, leaf) tuple, the same order), each
        # key's leaf in `_queued` until popped
        self._heap: list[int] = []
        self._queued: dict[int, _Node] = {}
        self._tie = 0  # the last heap tie-breaker given
        # the node the last match ended at, and its prefix (`_hit_start`)
        self._matched: _Node | None = None
        self._matched_prefix: Prefix | None = None
        # When a list: each evicted leaf, in order, as (first depth, tokens, its first token's
        # key) (the conformance harness reads it; None in a run)
        self.evicted_log: list[tuple[int, int, tuple[int, int]]] | None = None
        # a host tier (`kvsched.kvcache.offload.HostTier`) evicted pages go to
        self.spill: HostTier | None = None

    # -- sizes ---------------------------------------------------------------------------

    @property
    def free_tokens(self) -> int:
        """Tokens neither cached, held, nor promised to an admission."""
        return self._free()

    @property
    def available_tokens(self) -> int:
        """Tokens no request or node holds: SGLang's `allocator.available_size()`."""
        return self._available()

    # (the two counts as methods: C calls in the compiled build, where a property is an
    # attribute lookup; the tree asks them at every allocation)
    def _free(self) -> int:
        return self.capacity - self.tree_tokens - self._private_total - self._promised_total

    def _available(self) -> int:
        return self.capacity - self.tree_tokens - self._private_total

    def evictable_tokens(self) -> int:
        return self._evictable

    @property
    def num_free(self) -> int:
        return (self._free() + self._evictable) // self.block_size

    @property
    def num_cached(self) -> int:
        return self.blocks_cached()

    def blocks_cached(self) -> int:
        """`num_cached` as the compiled tracker reads it: a C call, not a Python property."""
        return self.tree_tokens // self.block_size

    @property
    def evicted_blocks(self) -> int:
        return self.evicted // self.block_size

    # -- the tree ------------------------------------------------------------------------

    def _path(self, prefix: Prefix, limit: int, start: _Node | None = None
              ) -> list[tuple[_Node, int]]:
        """The nodes matching `prefix`'s first `limit` tokens below `start` (the root, or a
        node on `prefix`'s path: `_start`), each with the tokens it matches (only the last
        may match part of its edge). Reads the tree, changes nothing."""
        out: list[tuple[_Node, int]] = []
        limit = min(limit, prefix.num_tokens)
        page = self.block_size
        node = self.root if start is None else start
        depth = node.end
        while depth + page <= limit:
            child = node.children.get(block_key(prefix, page, depth // page))
            if child is None:
                break
            end = _agreement(child, prefix, limit, page)
            out.append((child, end - depth))
            if end < child.end:
                break
            node, depth = child, end
        return out

    def _start(self, node: _Node | None, limit: int) -> _Node:
        """Where a walk of `limit` tokens of a prefix may start instead of the root: `node`,
        a node known to be on that prefix's path (a run's locked node, the last match's
        end), if it is still in the tree and no deeper than `limit`. Every node above it is
        on the path too, so the walk from the root would pass through it."""
        if (node is None or node.end > limit
                or (node.parent is None and node is not self.root)):  # (evicted)
            return self.root
        return node

    def _walk(self, prefix: Prefix, limit: int, split: bool,
              start: _Node | None = None) -> tuple[_Node, int]:
        """The deepest node matching `prefix`'s first `limit` tokens and the tokens matched;
        with `split`, a match ending inside an edge splits it there (SGLang's match_prefix).
        `start`: a node on the path (`_start`), whose ancestors are read by their parent
        pointers, not looked up."""
        node = self.root if start is None else start
        matched = node.end
        self._refresh(node)  # (the walk's access time)
        now = self._clock
        for child, shared in self._path(prefix, limit, node):
            child.last_access = now
            if not child.lock and not child.children:
                self._candidate(child)
            matched += shared
            if shared < child.end - child.start:
                if split:
                    node = self._split(child, shared)
                break
            node = child
        return node, matched

    def _split(self, child: _Node, tokens: int) -> _Node:
        parent = child.parent
        assert parent is not None and child.chain is not None
        middle = _Node(child.chain, child.start, child.start + tokens, child.key, parent)
        middle.lock = child.lock
        middle.last_access = child.last_access
        parent.children[middle.key] = middle
        child.start = middle.end
        child.key = block_key(child.chain, self.block_size, child.start // self.block_size)
        child.parent = middle
        middle.children[child.key] = child
        if not child.lock:  # the tail leaf keeps its place in the heap under a new key
            self._candidate(child)
        return middle

    def _lock(self, node: _Node, delta: int) -> None:
        walk: _Node | None = node
        while walk is not None and walk is not self.root:
            before = walk.lock
            walk.lock += delta
            assert walk.lock >= 0
            if not before:
                self._evictable -= walk.end - walk.start
            elif not walk.lock:
                self._evictable += walk.end - walk.start
                if not walk.children:
                    self._candidate(walk)
            walk = walk.parent

    def _candidate(self, leaf: _Node) -> None:
        self._tie += 1
        if self._tie >= _TIE_SPAN or leaf.last_access >= _MAX_ACCESS:
            raise OverflowError("the radix tree's eviction order ran out of keys")
        key = leaf.last_access * _TIE_SPAN + self._tie
        item = key  # (compiled: the one Python int the dict and the heap hold)
        self._queued[item] = leaf
        heappush(self._heap, item)

    def _insert(self, prefix: Prefix, total: int) -> int:
        """Insert `prefix`'s first `total` tokens; the tokens that were already in the tree."""
        before = self.tree_tokens
        end = self._grow(prefix, total)
        added = self.tree_tokens - before
        if added:  # a new leaf
            self._candidate(end)
        return end.end - added

    def _grow(self, prefix: Prefix, total: int, start: _Node | None = None) -> _Node:
        """Insert `prefix`'s first `total` tokens (whole pages), walking from `start` (a node
        on the path, or the root); the node ending there (a new leaf is not yet an eviction
        candidate: the caller makes it one, or locks it)."""
        total = min(total, prefix.num_tokens)
        total -= total % self.block_size  # whole pages (RadixKey.page_aligned)
        node, matched = self._walk(prefix, total, True, self._start(start, total))
        if matched < total:
            leaf = _Node(prefix, matched, total,
                         block_key(prefix, self.block_size, matched // self.block_size), node)
            self._clock += 1
            leaf.last_access = self._clock
            node.children[leaf.key] = leaf
            self.tree_tokens += total - matched
            self._evictable += total - matched
            return leaf
        return node

    def _refresh(self, node: _Node) -> None:
        """`_walk` again down to `node`, which ends on a page: the path is `node`'s parents,
        read without a lookup (only the path's last node can be a leaf, so one candidate
        at most, as the walk gives)."""
        self._clock += 1
        now = self._clock
        walk: _Node | None = node
        while walk is not None and walk is not self.root:
            walk.last_access = now
            walk = walk.parent
        if node is not self.root and not node.lock and not node.children:
            self._candidate(node)

    def _evict(self, tokens: int) -> None:
        """Free at least `tokens` by removing unlocked leaves, least recently used first."""
        heap = self._heap
        queued = self._queued
        freed = 0
        while freed < tokens and heap:
            item = heappop(heap)
            leaf = queued.pop(item)
            key = item  # (compiled: as a C integer)
            access = key // _TIE_SPAN
            parent = leaf.parent
            if (parent is None or leaf.lock or leaf.children or access != leaf.last_access
                    or parent.children.get(leaf.key) is not leaf):
                continue  # stale: locked, grown, touched since, or already gone
            del parent.children[leaf.key]
            leaf.parent = None
            tokens_of = leaf.end - leaf.start
            self.tree_tokens -= tokens_of
            self._evictable -= tokens_of
            freed += tokens_of
            self.evicted += tokens_of
            if self.spill is not None:  # its whole pages go to the host tier
                size = self.block_size
                self.spill.put(leaf.chain, leaf.start // size, leaf.end // size)
            if self.evicted_log is not None:
                chain = leaf.chain
                assert chain is not None
                self.evicted_log.append((leaf.start, leaf.num_tokens, chain.token_key(leaf.start)))
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

    def match(self, prefix: Prefix | None, num_tokens: int, split: bool = False) -> int:
        """`split`: as SGLang's `match_prefix` for a request the round tries, a match ending
        inside an edge splits it there."""
        if prefix is None or num_tokens <= 1:
            return 0
        node, matched = self._walk(prefix, num_tokens - 1, split)
        # An admission asks next what its hit costs and then takes it: the same path,
        # read from this node by its parents
        self._matched = node
        self._matched_prefix = prefix
        return matched // self.block_size * self.block_size

    def touch(self, prefix: Prefix, num_tokens: int) -> None:
        """SGLang's `touch_prefix`: refresh (and split) the path of a whole sequence."""
        self._walk(prefix, num_tokens - num_tokens % self.block_size, True)

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        # The hit's path is locked before anything is evicted: it cannot make room.
        return num_new * self.block_size <= (self._free() + self._evictable
                                             - self._unlocked_on_path(prefix, hit_tokens))

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Free blocks taking the hit costs: its tokens that no running request locks."""
        unlocked = self._unlocked_on_path(prefix, hit_tokens)
        free = self._free() + self._evictable
        return free // self.block_size - (free - unlocked) // self.block_size

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks (taken this step, holding nothing):
        promised ones first."""
        tokens = num_blocks * self.block_size
        run = self._runs[owner]
        promised = min(run.promised, tokens)
        run.promised -= promised
        self._promised_total -= promised
        run.private -= tokens - promised
        self._private_total -= tokens - promised

    def _unlocked_on_path(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Tokens of the first `hit_tokens` of `prefix` held by unlocked nodes."""
        if prefix is None or hit_tokens <= 0:
            return 0
        unlocked = 0
        start = self._hit_start(prefix, hit_tokens)
        walk: _Node | None = start
        while walk is not None and walk is not self.root:
            if not walk.lock:
                unlocked += walk.end - walk.start
            walk = walk.parent
        for node, shared in self._path(prefix, hit_tokens, start):
            if not node.lock:
                unlocked += shared
        return unlocked

    def _hit_start(self, prefix: Prefix, hit_tokens: int) -> _Node:
        """Where a walk of a hit of `prefix` may start: the last match's node, if that
        match was `prefix`'s (`_start`)."""
        if self._matched_prefix is not prefix:
            return self.root
        return self._start(self._matched, hit_tokens)

    def _join(self, owner: int, prefix: Prefix | None, hit_tokens: int) -> _Run:
        """`owner` takes its hit: the path locked, its tokens its own."""
        node = self.root
        if prefix is not None and hit_tokens > 0:
            node, matched = self._walk(prefix, hit_tokens, True,
                                       self._hit_start(prefix, hit_tokens))
            if matched != hit_tokens:
                raise ValueError(f"owner {owner}: {hit_tokens} hit tokens are not cached")
        self._lock(node, +1)
        run = self._runs[owner] = _Run(node, prefix, hit_tokens)
        return run

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        need = num_new * self.block_size
        run = self._runs.get(owner)
        if run is None:
            run = self._join(owner, prefix, hit_tokens)
        if need > self._free():  # (blocks promised to admissions stay theirs)
            self._evict(need - self._free())
        if need > self._free():
            raise ValueError(f"owner {owner}: {num_new} new blocks do not fit")
        run.private += need
        self._private_total += need

    def promise(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                num_new: int) -> None:
        """Admit `owner` with its hit and `num_new` fresh blocks kept for its chunks, taken
        (and evicted for) as `materialize` takes the chunks `computed` notes."""
        need = num_new * self.block_size
        run = self._runs.get(owner)
        if run is None:
            run = self._join(owner, prefix, hit_tokens)
        if need > self._free() + self._evictable:
            raise ValueError(f"owner {owner}: {num_new} new blocks do not fit")
        run.promised += need
        self._promised_total += need

    def computed(self, owner: int, num_tokens: int) -> None:
        """`owner`'s first `num_tokens` tokens are computed in this step (a chunk)."""
        run = self._runs.get(owner)
        if run is not None and num_tokens > run.done:
            self._chunks.append((owner, num_tokens - run.done, num_tokens))
            run.done = num_tokens

    def materialize(self) -> None:
        """Take the pages of the step's chunks, as SGLang's `alloc_for_extend` does for a
        prefill batch (`mem_cache/allocation.py` line 374): first evict what the pool lacks
        for the extend tokens (with pages above one, a page more per request, line 187),
        then each request fills its last page and takes new ones."""
        chunks = self._chunks
        if not chunks:
            return
        size = self.block_size
        demand = 0
        for _owner, extend, _tokens in chunks:
            demand += extend
        if size > 1:
            demand += len(chunks) * size
        available = self._available()
        if demand > available:
            self._evict(demand - available)
        runs = self._runs
        for owner, _extend, tokens in chunks:
            run = runs.get(owner)
            if run is None:
                continue
            take = -(-tokens // size) * size - run.inserted - run.private
            take = min(max(take, 0), run.promised)
            run.promised -= take
            self._promised_total -= take
            run.private += take
            self._private_total += take
        chunks.clear()

    def grow_promise(self, owners: list[int]) -> None:
        """One block promised to each of `owners` for the decode pass under way, taken by
        `decode_pass` once the pass's retractions are done (SGLang allocates a decode
        pass's pages in `prepare_for_decode`, after `retract_decode`)."""
        size = self.block_size
        need = len(owners) * size
        if need > self._free() + self._evictable:
            raise ValueError(f"{len(owners)} new blocks do not fit")
        runs = self._runs
        for owner in owners:
            run = runs[owner]
            run.promised += size
        self._promised_total += need
        self._grown.extend(owners)

    def decode_pass(self, num_decodes: int) -> None:
        """Take the pass's promised blocks as SGLang's `alloc_for_decode` does: first
        evict what the pool lacks for a page per request (`allocation.py` line 581: with
        pages of one, exactly what the pass takes), then take them."""
        size = self.block_size
        demand = num_decodes * size
        available = self._available()
        if demand > available:
            self._evict(demand - available)
        grown = self._grown
        runs = self._runs
        for owner in grown:
            run = runs.get(owner)
            if run is not None and run.promised >= size:
                run.promised -= size
                run.private += size
                self._promised_total -= size
                self._private_total += size
        grown.clear()

    def grow_passes(self, crossed: list[tuple[int, int]]) -> None:
        """Several decode passes' pages in one move, none of which evicts (the caller
        checked): each (owner, pages) takes them as `grow_promise` then `decode_pass`
        would, pass by pass (every owner holds blocks, as there)."""
        size = self.block_size
        runs = self._runs
        for owner, pages in crossed:
            tokens = pages * size
            run = runs[owner]
            run.private += tokens
            self._private_total += tokens

    def decode_evicts(self, num_decodes: int) -> bool:
        """Whether the next decode pass of `num_decodes` requests evicts (a pool below a
        page per request, something evictable)."""
        return self._evictable > 0 and num_decodes * self.block_size > self._available()

    def evict_all(self) -> None:
        """Evict every unlocked leaf (SGLang's `check_decode_mem` before a retraction: the
        pass lacks more than the tree can give)."""
        self._evict(self._evictable)

    def retract(self, owner: int, reserve: int) -> None:
        """SGLang's `release_req` for a retracted or preempted request: its KV freed, its
        path unlocked, then evicted what the pool lacks for `reserve` tokens
        (`schedule_batch.py` line 2384: 20 per request left in the batch)."""
        self.free(owner)
        available = self._available()
        if reserve > available:
            self._evict(reserve - available)

    def grow_each(self, owners: list[int]) -> None:
        """One fresh block for each of `owners` (which hold blocks already), taken at once:
        the leaves `allocate(owner, None, 0, 1)` one owner after another evicts."""
        size = self.block_size
        need = len(owners) * size
        if need > self._free():
            self._evict(need - self._free())
        if need > self._free():
            raise ValueError(f"{len(owners)} new blocks do not fit")
        runs = self._runs
        for owner in owners:
            run = runs[owner]
            run.private += size
        self._private_total += need

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int,
               prompt_tokens: int = 0) -> None:
        """`owner`'s first `num_tokens` tokens join the tree (whole pages); its lock moves to
        their last node. `prompt_tokens`: as SGLang's `checkpoint_into_tree`
        (`unified_radix_cache.py` line 1268), the new path is also split at the prompt's
        last whole page, so that eviction can drop the output without the prompt."""
        run = self._runs.get(owner)
        if prefix is None or run is None:
            return
        size = self.block_size
        tokens = num_tokens // size * size
        if tokens <= run.inserted:
            if tokens:  # nothing new, but SGLang's insert still walks (refreshes) the path
                self._walk(prefix, tokens, True)
            return
        before = self.tree_tokens
        old = run.node
        known = old if run.prefix is prefix else None  # (on the path: walks start there)
        end = self._grow(prefix, tokens, known)
        # Locked at once, not after the walks below: they would make it an eviction
        # candidate only to lock it (heap entries popped as stale). Its place in the
        # eviction order is the same: its last access, which `_refresh` gives it alone
        # (its ancestors, which share it, cannot be candidates while it is there).
        self._lock(end, +1)
        added = self.tree_tokens - before
        dup = tokens - run.inserted - added  # computed twice: back to the pool
        back = min(run.private, added + dup)
        run.private -= back
        self._private_total -= back
        prompt = prompt_tokens - prompt_tokens % size
        if 0 < prompt < tokens:
            self._walk(prefix, prompt, True, self._start(known, prompt))
        self._refresh(end)  # (SGLang walks the inserted path again)
        self._lock(old, -1)
        run.node = end
        run.inserted = tokens

    def free(self, owner: int) -> None:
        run = self._runs.pop(owner, None)
        if run is None:
            return
        self._lock(run.node, -1)
        self._private_total -= run.private
        self._promised_total -= run.promised

    def blocks_of(self, owner: int) -> Sequence[int]:
        run = self._runs.get(owner)
        if run is None:
            return range(0)
        return range((run.inserted + run.private + run.promised) // self.block_size)

    def check(self) -> None:
        """Invariants (for tests): tokens conserved, locks consistent."""
        assert self.free_tokens + self._evictable >= 0 and self.free_tokens <= self.capacity
        total = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            total += node.num_tokens
            for child in node.children.values():
                assert child.parent is node and child.lock <= node.lock or node is self.root
                stack.append(child)
        assert total == self.tree_tokens
        private = promised = 0
        for run in self._runs.values():
            private += run.private
            promised += run.promised
        assert self._private_total == private and self._promised_total == promised
        assert 0 <= self.available_tokens <= self.capacity
        unlocked = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root and not node.lock:
                unlocked += node.num_tokens
            stack.extend(node.children.values())
        assert unlocked == self._evictable, (unlocked, self._evictable)
