"""The KV block pool: counts of free and used blocks, and the watermark admissions respect.

Blocks are interchangeable (no prefix sharing), so the pool only counts them.
"""

from __future__ import annotations


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold `num_tokens` tokens of KV cache."""
    return -(-num_tokens // block_size)


class BlockPool:
    """`free` device blocks out of `num_blocks`; admissions keep `watermark_blocks` free."""

    __slots__ = ("num_blocks", "watermark_blocks", "free")

    def __init__(self, num_blocks: int, watermark_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.watermark_blocks = watermark_blocks
        self.free = num_blocks

    def can_admit(self, num_blocks: int) -> bool:
        """Whether an admission of `num_blocks` leaves the watermark free."""
        return self.free - num_blocks >= self.watermark_blocks

    def allocate(self, num_blocks: int) -> None:
        assert num_blocks <= self.free, "allocation beyond the pool"
        self.free -= num_blocks

    def release(self, num_blocks: int) -> None:
        self.free += num_blocks
        assert self.free <= self.num_blocks, "released more blocks than allocated"
