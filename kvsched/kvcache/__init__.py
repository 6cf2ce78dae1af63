"""KV caches with block identity: one protocol (`KVCache`), two implementations, picked by
`engine.prefix_cache` from `CACHES`, the registry (a new kind: its module and one line there).

- `HashedBlockCache`: vLLM V1's prefix cache: full blocks identified by a hash chain,
  freed blocks kept cached in an LRU free queue until a new block is needed.
- `RadixCache`: SGLang's radix tree over tokens, LRU eviction of unreferenced leaves.

Without a prefix cache the engine counts blocks (`kvsched.blocks.BlockPool`); the
scheduler drives a cache through `kvsched.kvcache.tracker.PrefixTracker`.
"""

from kvsched.kvcache.base import KVCache
from kvsched.kvcache.hashed import HashedBlockCache
from kvsched.kvcache.radix import RadixCache

CACHES: dict[str, type[HashedBlockCache] | type[RadixCache]] = {
    "hashed": HashedBlockCache, "radix": RadixCache}
"""The prefix caches an engine can run, by `engine.prefix_cache` name (the first is the
default)."""

__all__ = ["CACHES", "HashedBlockCache", "KVCache", "RadixCache"]
