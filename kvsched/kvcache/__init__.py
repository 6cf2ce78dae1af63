"""KV caches with block identity: one protocol (`KVCache`), several implementations.

- `CountingPool`: blocks are interchangeable, nothing is ever cached (the lesson's pool).
- `HashedBlockCache`: vLLM V1's prefix cache: full blocks identified by a hash chain,
  freed blocks kept cached in an LRU free queue until a new block is needed.
- `RadixCache`: SGLang's radix tree over tokens, LRU eviction of unreferenced leaves.

The engine's scheduler still uses the counting pool of `kvsched.blocks`; these caches are
built and tested on their own first (prefix caching, issue 10, wires them in).
"""

from kvsched.kvcache.base import KVCache
from kvsched.kvcache.counting import CountingPool
from kvsched.kvcache.hashed import HashedBlockCache
from kvsched.kvcache.radix import RadixCache

CACHES = {"counting": CountingPool, "hashed": HashedBlockCache, "radix": RadixCache}

__all__ = ["CACHES", "CountingPool", "HashedBlockCache", "KVCache", "RadixCache"]
