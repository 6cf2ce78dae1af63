"""vLLM V1's prefix cache kept block by block, as kvsched kept it until the cache moved onto runs
of blocks: the oracle that tests/test_kvcache_runs.py holds `kvsched.kvcache.HashedBlockCache` to.

vLLM V1's prefix cache (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`), in blocks.

A full block is identified by the hash of its parent's hash and its tokens (conformance/
RULES.md P1-P7, read from vLLM 0.33 and checked against it). The free queue is always
[free blocks without a hash][free cached blocks, least recently freed first]: a freed block
without a hash goes to the front and is reused first, a cached one to the back; a new block
is popped from the front, so a cached block is evicted (its hash forgotten) only once no
uncached block is free. A request frees its blocks tail first, so its last blocks are
evicted before its first ones. A hit is the longest run of cached full blocks from the
start, at most `num_tokens - 1` tokens. Blocks shared by running requests are held once,
with a reference count; blocks are not de-duplicated (two requests computing the same
block cache both copies, and a lookup takes the first cached).

Uncached free blocks are interchangeable, so they are a count: only blocks that carry a
hash, or are held, are objects.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from kvsched.prefix import Prefix


class _Block:
    __slots__ = ("ref", "hash")

    def __init__(self) -> None:
        self.ref = 1
        self.hash: int | None = None


class HashedBlockCache:
    """`KVCache` with vLLM's hashed blocks and free queue."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._uncached_free = num_blocks
        # free cached blocks, least recently freed first (an OrderedDict: popping its head is
        # O(1), where a dict's first key is found past every slot deleted before it)
        self._lru: OrderedDict[_Block, None] = OrderedDict()
        self._cached: dict[int, list[_Block]] = {}  # hash -> blocks holding it, oldest first
        self._num_cached = 0
        self._owned: dict[int, list[_Block]] = {}
        self._committed: dict[int, int] = {}  # owner -> leading blocks with a hash
        self.evicted = 0  # cached blocks evicted so far
        self._version = 0  # bumped by every change a lookup could see
        self._memo: tuple[Prefix | None, int, list[_Block]] = (None, -1, [])

    @property
    def num_free(self) -> int:
        return self._uncached_free + len(self._lru)

    @property
    def num_cached(self) -> int:
        return self._num_cached

    @property
    def evicted_blocks(self) -> int:
        return self.evicted

    def _hit_blocks(self, prefix: Prefix | None, hit_tokens: int) -> list[_Block]:
        if prefix is None or hit_tokens <= 0:
            return []
        memo_prefix, version, run = self._memo
        if memo_prefix is not prefix or version != self._version:
            # The whole cached run of this prefix, kept until the cache changes: a lookup,
            # its cost and its allocation read it once.
            run = []
            cached = self._cached
            for block_hash in prefix.block_hashes(self.block_size):
                holders = cached.get(block_hash)
                if not holders:
                    break
                run.append(holders[0])
            self._memo = (prefix, self._version, run)
        return run[:hit_tokens // self.block_size]

    def match(self, prefix: Prefix | None, num_tokens: int) -> int:
        if prefix is None or num_tokens <= 1:
            return 0
        return len(self._hit_blocks(prefix, num_tokens - 1)) * self.block_size

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Hit blocks no one holds: taking them takes them out of the free queue."""
        return sum(1 for block in self._hit_blocks(prefix, hit_tokens) if not block.ref)

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        return num_new <= self.num_free - self.idle_hits(prefix, hit_tokens)

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        hits = self._hit_blocks(prefix, hit_tokens)
        if len(hits) * self.block_size != max(0, hit_tokens):
            raise ValueError(f"owner {owner}: {hit_tokens} hit tokens are not cached")
        if not self.can_allocate(prefix, hit_tokens, num_new):
            raise ValueError(f"owner {owner}: {num_new} new blocks, {self.num_free} free")
        blocks = self._owned.setdefault(owner, [])
        if blocks and hits:
            raise ValueError(f"owner {owner}: hits only on a first allocation")
        self._version += 1
        lru = self._lru
        for block in hits:  # touch: a cached block in use leaves the free queue
            if not block.ref:
                del lru[block]
            block.ref += 1
            blocks.append(block)
        if hits:
            self._committed[owner] = len(hits)
        fresh = min(num_new, self._uncached_free)
        self._uncached_free -= fresh
        blocks.extend(_Block() for _ in range(fresh))
        evict = num_new - fresh
        if evict:  # evicted only now that the blocks are needed
            cached = self._cached
            pop = lru.popitem
            for _ in range(evict):
                block = pop(last=False)[0]
                holders = cached[block.hash]  # type: ignore[index]
                if len(holders) == 1:
                    del cached[block.hash]  # type: ignore[arg-type]
                else:
                    holders.remove(block)
                block.hash = None
                block.ref = 1
                blocks.append(block)
            self._num_cached -= evict
            self.evicted += evict

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int) -> None:
        if prefix is None:
            return
        blocks = self._owned.get(owner)
        if not blocks:
            return
        full = min(num_tokens // self.block_size, len(blocks))
        done = self._committed.get(owner, 0)
        if full <= done:
            return
        self._version += 1
        hashes = prefix.block_hashes(self.block_size)
        cached = self._cached
        added = 0
        for j in range(done, min(full, len(hashes))):
            block = blocks[j]
            if block.hash is None:
                block_hash = block.hash = hashes[j]
                holders = cached.get(block_hash)
                if holders is None:
                    cached[block_hash] = [block]
                else:
                    holders.append(block)
                added += 1
        self._num_cached += added
        self._committed[owner] = full

    def _release(self, block: _Block) -> None:
        block.ref -= 1
        if not block.ref:
            if block.hash is None:
                self._uncached_free += 1  # the front: reused first
            else:
                self._lru[block] = None  # the back: evicted last among the cached

    def free(self, owner: int) -> None:
        self._version += 1
        lru = self._lru
        uncached = 0
        for block in reversed(self._owned.pop(owner, [])):
            block.ref -= 1
            if not block.ref:
                if block.hash is None:
                    uncached += 1  # the front: reused first
                else:
                    lru[block] = None  # the back: evicted last among the cached
        self._uncached_free += uncached
        self._committed.pop(owner, None)

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks (taken this step, holding nothing)."""
        self._version += 1
        blocks = self._owned[owner]
        for _ in range(num_blocks):
            self._release(blocks.pop())
        self._committed[owner] = min(self._committed.get(owner, 0), len(blocks))

    def blocks_of(self, owner: int) -> Sequence[int]:
        """Stable ids of `owner`'s blocks (equal ids: one shared block)."""
        return tuple(id(block) for block in self._owned.get(owner, ()))

    def check(self) -> None:
        """Invariants (for tests): every block free xor referenced, counts agree."""
        held: dict[_Block, int] = {}
        for blocks in self._owned.values():
            for block in blocks:
                held[block] = held.get(block, 0) + 1
        for block, count in held.items():
            assert block.ref == count and block not in self._lru, "held block miscounted"
        for block in self._lru:
            assert block.ref == 0 and block.hash is not None, "free queue holds a used block"
        assert self._uncached_free >= 0
        assert len(held) + self.num_free == self.num_blocks, "a block leaked"
        hashed = {block for blocks in self._cached.values() for block in blocks}
        assert self._num_cached == len(hashed) == sum(map(len, self._cached.values()))
        assert all(block.hash is not None for block in hashed)
