"""KV caches with block identity: one protocol (`KVCache`), two implementations, picked by
`engine.prefix_cache` from `kvsched.config.PREFIX_CACHES`, the registry (a new kind: its
module here and one line there).

- `HashedBlockCache`: vLLM V1's prefix cache: full blocks identified by a hash chain,
  freed blocks kept cached in an LRU free queue until a new block is needed.
- `RadixCache`: SGLang's radix tree over tokens, LRU eviction of unreferenced leaves.

Without a prefix cache the engine counts blocks (`kvsched.blocks.BlockPool`); the
scheduler drives a cache through `kvsched.kvcache.tracker.PrefixTracker`.
"""

from kvsched.kvcache.base import KVCache
from kvsched.kvcache.hashed import HashedBlockCache
from kvsched.kvcache.radix import RadixCache

__all__ = ["HashedBlockCache", "KVCache", "RadixCache"]
