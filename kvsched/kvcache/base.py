"""The protocol every KV cache implements, in blocks of `block_size` tokens.

An owner (a request's run) holds a list of blocks covering its computed tokens. `match`
finds how much of a prefix is already cached; `allocate` gives an owner its hit blocks and
fresh ones; `commit` records which of its blocks are now full (and so shareable); `free`
gives them all back. Blocks shared by several owners are counted once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kvsched.prefix import Prefix

if TYPE_CHECKING:
    from kvsched.kvcache.offload import HostTier
    from kvsched.sequence import Seq


class KVCache(Protocol):
    """A cache kind: a class with these members (what `kvsched.kvcache.tracker` asks of it),
    in its own module, and its line in `kvsched.config.PREFIX_CACHES`."""

    num_blocks: int
    block_size: int
    # True: a request's blocks are cached as they are computed and stay cached when it is
    # preempted (vLLM); False: what it computed joins the cache when it finishes, a
    # preemption frees it uncached (SGLang; the `sglang` preset's loop then drives the
    # cache step by step, through `RadixCache`'s own methods)
    commits_running: bool
    spill: HostTier | None  # where evicted blocks go (`engine.kv_offload`), set by the tracker

    @property
    def num_free(self) -> int:
        """Blocks a new allocation may take now (free ones, cached or not)."""
        ...

    @property
    def num_cached(self) -> int:
        """Blocks that hold a reusable prefix (in use or free)."""
        ...

    @property
    def evicted_blocks(self) -> int:
        """Cached blocks evicted so far."""
        ...

    def match(self, prefix: Prefix | None, num_tokens: int, whole: bool = False) -> int:
        """Tokens of the first `num_tokens` of `prefix` already cached, in whole blocks and
        at most `num_tokens - 1` (the last token is always computed, for its logits);
        `whole`: all of them (vLLM V0's count, asked only of a cache that commits while
        running)."""
        ...

    def idle_hits(self, prefix: Prefix | None, hit_tokens: int) -> int:
        """Free blocks a hit of `hit_tokens` takes (hit blocks no owner holds)."""
        ...

    def allocate(self, owner: int, prefix: Prefix | None, hit_tokens: int,
                 num_new: int) -> None:
        """`owner` takes its hit blocks (shared) and `num_new` fresh ones at its tail."""
        ...

    def grow_each(self, owners: list[int]) -> None:
        """Each of `owners` takes one fresh block, in that order."""
        ...

    def commit(self, owner: int, prefix: Prefix | None, num_tokens: int,
               prompt_tokens: int = 0) -> None:
        """`owner`'s first `num_tokens` tokens are computed: its full blocks become
        shareable (`prompt_tokens`: the prompt's end, where a tree may split the path)."""
        ...

    def shrink(self, owner: int, num_blocks: int) -> None:
        """`owner` gives back its last `num_blocks` blocks."""
        ...

    def free(self, owner: int) -> None:
        """`owner` gives back every block, tail first (freed tail blocks are evicted
        first)."""
        ...


class CacheView(Protocol):
    """What a cache-aware policy or a router may read of a running engine's KV cache: never
    a way to change it. `match(seq)` is how many tokens of `seq`'s next (re)prefill the cache
    holds right now (what its admission would hit), in whole blocks."""

    block_size: int

    @property
    def num_free(self) -> int: ...

    @property
    def num_cached(self) -> int: ...

    def match(self, seq: Seq) -> int: ...
