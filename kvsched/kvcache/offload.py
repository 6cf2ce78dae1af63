"""A host-memory tier under a GPU prefix cache (`engine.kv_offload`).

Cached blocks the GPU cache evicts are written to host memory instead of being forgotten (as
SGLang's HiCache does with its write-back policy: a node leaves the device tree for the host
one), kept least recently used first within `capacity` blocks. A later request whose prefix
the GPU cache no longer holds finds the blocks that follow its GPU hit here, one run from
where the GPU hit ends; they are loaded back into fresh GPU blocks instead of being computed
(the engine charges the load to the step that admits the request). Blocks are named by their
chained hashes (`Prefix.block_hashes`), the same identity as on the GPU.
"""

from __future__ import annotations

from collections import OrderedDict

from kvsched.prefix import Prefix


class HostTier:
    """An LRU set of block hashes, at most `capacity` of them."""

    def __init__(self, capacity: int, block_size: int) -> None:
        self.capacity = capacity
        self.block_size = block_size
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.stored = 0  # blocks written here (a block already here is only refreshed)
        self.dropped = 0  # blocks pushed out to make room
        self.loaded = 0  # blocks read back into the GPU cache

    def __len__(self) -> int:
        return len(self._blocks)

    def put(self, chain: Prefix | None, first: int, end: int) -> None:
        """The GPU evicted `chain`'s blocks `first` .. `end - 1`: keep them, their tail
        oldest (a run past a missing block is of no use, so the tail goes first)."""
        assert chain is not None, "a cached block is named by its chain"
        if self.capacity <= 0 or end <= first:
            return
        hashes = chain.block_hashes(self.block_size)
        blocks = self._blocks
        for k in range(min(end, len(hashes)) - 1, first - 1, -1):
            key = hashes[k]
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
                self.stored += 1
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
            self.dropped += 1

    def run(self, prefix: Prefix, first: int, limit: int) -> int:
        """How many of `prefix`'s blocks `first`, `first + 1`, ... (below `limit`) are here,
        in a row (a lookup: nothing moves)."""
        hashes = prefix.block_hashes(self.block_size)
        blocks = self._blocks
        n = 0
        end = min(limit, len(hashes))
        while first + n < end and hashes[first + n] in blocks:
            n += 1
        return n

    def load(self, prefix: Prefix, first: int, count: int) -> None:
        """Blocks `first` .. `first + count - 1` are read back: the most recently used now
        (host memory keeps its copy, as a cache)."""
        hashes = prefix.block_hashes(self.block_size)
        blocks = self._blocks
        for k in range(first, first + count):
            blocks.move_to_end(hashes[k])
        self.loaded += count

    def check(self) -> None:
        """No block leaked or invented: what is here is what was stored less what was
        pushed out, within the capacity."""
        assert len(self._blocks) == self.stored - self.dropped <= max(self.capacity, 0)
