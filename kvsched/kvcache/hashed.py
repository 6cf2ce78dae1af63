"""vLLM V1's prefix cache (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`), in blocks.

A full block is identified by the hash of its parent's hash and its tokens. Blocks freed by
their last owner keep their hash and go to the tail of a free queue; a new block is taken
from the head, and only then is a cached one evicted (its hash forgotten). A request's
blocks are freed tail first, so a request's last blocks are evicted before its first ones.
A hit is the longest run of cached full blocks from the start, at most `num_tokens - 1`
tokens. Blocks shared by running requests are held once, with a reference count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from kvsched.prefix import Prefix


class HashedBlockCache:
    """`KVCache` with vLLM's hashed blocks and LRU free queue."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[int, dict[int, None]] = {}  # hash -> blocks holding it
        self._num_cached = 0
        self._owned: dict[int, list[int]] = {}
        self._committed: dict[int, int] = {}  # owner -> leading blocks with a hash
        self.evicted = 0  # cached blocks evicted so far

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return self._num_cached

    def _hit_blocks(self, prefix: Prefix | None, hit_tokens: int) -> list[int]:
        if prefix is None or hit_tokens <= 0:
            return []
        hashes = prefix.block_hashes(self.block_size, hit_tokens)
        blocks = []
        for block_hash in hashes:
            holders = self._cached.get(block_hash)
            if not holders:
                break
            blocks.append(next(iter(holders)))
        return blocks

    def match(self, prefix: Prefix | None, num_tokens: int) -> int:
        if prefix is None or num_tokens <= 1:
            return 0
        return len(self._hit_blocks(prefix, num_tokens - 1)) * self.block_size

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        hits = self._hit_blocks(prefix, hit_tokens)
        idle_hits = sum(1 for block in hits if not self._ref[block])
        return num_new <= len(self._free) - idle_hits

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        hits = self._hit_blocks(prefix, hit_tokens)
        if len(hits) * self.block_size != max(0, hit_tokens):
            raise ValueError(f"owner {owner}: {hit_tokens} hit tokens are not cached")
        if not self.can_allocate(prefix, hit_tokens, num_new):
            raise ValueError(f"owner {owner}: {num_new} new blocks, {len(self._free)} free")
        blocks = self._owned.setdefault(owner, [])
        if blocks and hits:
            raise ValueError(f"owner {owner}: hits only on a first allocation")
        for block in hits:  # touch: a cached block in use leaves the free queue
            if not self._ref[block]:
                del self._free[block]
            self._ref[block] += 1
            blocks.append(block)
        if hits:
            self._committed[owner] = len(hits)
        for _ in range(num_new):
            block, _ = self._free.popitem(last=False)
            old = self._hash[block]
            if old is not None:  # evicted only now that the block is needed
                holders = self._cached[old]
                del holders[block]
                if not holders:
                    del self._cached[old]
                self._hash[block] = None
                self._num_cached -= 1
                self.evicted += 1
            self._ref[block] = 1
            blocks.append(block)

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Hit blocks no one holds: taking them takes them out of the free queue."""
        return sum(1 for block in self._hit_blocks(prefix, hit_tokens) if not self._ref[block])

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks (taken this step, holding nothing)."""
        blocks = self._owned[owner]
        for _ in range(num_blocks):
            block = blocks.pop()
            self._ref[block] -= 1
            if not self._ref[block]:
                self._free[block] = None

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int) -> None:
        if prefix is None:
            return
        blocks = self._owned.get(owner, [])
        full = min(num_tokens // self.block_size, len(blocks))
        done = self._committed.get(owner, 0)
        if full <= done:
            return
        hashes = prefix.block_hashes(self.block_size, full * self.block_size)
        for j in range(done, min(full, len(hashes))):
            block = blocks[j]
            if self._hash[block] is None:
                self._hash[block] = hashes[j]
                self._cached.setdefault(hashes[j], {})[block] = None
                self._num_cached += 1
        self._committed[owner] = full

    def free(self, owner: int) -> None:
        for block in reversed(self._owned.pop(owner, [])):
            self._ref[block] -= 1
            if not self._ref[block]:
                self._free[block] = None  # the tail: evicted last among the free
        self._committed.pop(owner, None)

    def blocks_of(self, owner: int) -> Sequence[int]:
        return tuple(self._owned.get(owner, ()))

    def check(self) -> None:
        """Invariants (for tests): every block is free xor referenced, counts agree."""
        for block in range(self.num_blocks):
            assert (block in self._free) == (self._ref[block] == 0), block
        held = [b for blocks in self._owned.values() for b in blocks]
        for block in range(self.num_blocks):
            assert self._ref[block] == held.count(block), block
        assert self._num_cached == sum(h is not None for h in self._hash)
