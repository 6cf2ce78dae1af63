"""The reference the identity caches reduce to when nothing is shared: interchangeable
blocks, counted, nothing ever cached (the `KVCache` protocol over the lesson's pool; the
engine itself counts blocks in `kvsched.blocks.BlockPool`)."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.prefix import Prefix


class CountingPool:
    """`KVCache` without identity: the reference the identity caches reduce to."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._held: dict[int, int] = {}
        self._free = num_blocks

    @property
    def num_free(self) -> int:
        return self._free

    @property
    def num_cached(self) -> int:
        return 0

    def match(self, prefix: Prefix | None, num_tokens: int) -> int:
        return 0

    def can_allocate(self, prefix: Prefix | None, hit_tokens: int, num_new: int) -> bool:
        return num_new <= self._free

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        if num_new > self._free:
            raise ValueError(f"allocation of {num_new} blocks with {self._free} free")
        self._free -= num_new
        self._held[owner] = self._held.get(owner, 0) + num_new

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int) -> None:
        return None

    def free(self, owner: int) -> None:
        self._free += self._held.pop(owner, 0)

    def blocks_of(self, owner: int) -> Sequence[int]:
        return range(self._held.get(owner, 0))
