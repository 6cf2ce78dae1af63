"""The scheduler's side of a prefix cache: who holds what, in the scheduler's block counts.

The scheduler keeps counting blocks (`BlockPool.free`, `Seq.blocks`), which is all the
lesson's pool needs; with prefix caching on, every allocation and release also goes through
a `KVCache` with block identity, and the pool's free count is kept equal to the cache's
(blocks cached but unreferenced are free: a new block may evict them).

A request's identity is its workload prefix completed with its own tokens: the rest of its
prompt and its answer are private segments, so a request preempted and resumed finds its own
blocks. Prompt blocks are hashed as soon as their chunk is scheduled (vLLM caches them when it
allocates them; under vLLM V0's rules, `v0`, the whole prompt's full blocks at admission,
counted as cached only from the next step: conformance/RULES.md V0-10). Blocks of
generated tokens: in the pass that fills them with the hashed cache (as vLLM), when the
request finishes with the radix tree (as SGLang).

Under SGLang's scheduler (`stepped`) the radix tree follows SGLang's step
(conformance/SGLANG_RULES.md S18-S22): an admission's match splits the node it ends in, its
fresh blocks are promised and the step's chunks taken after the round (`settle`, evicting
what they lack), a decode pass takes its pages after its retractions (`decode_pass`), and what
a step computed joins the tree after it, in the batch's order (a finish inserts all it
computed, a completed prefill its prompt, the chunked request's middle chunk at the start of
the next step, as SGLang's `stash_chunked_request`).
"""

from __future__ import annotations

from kvsched.blocks import BlockPool
from kvsched.config import PREFIX_CACHES, EngineConfig
from kvsched.kvcache.base import KVCache
from kvsched.kvcache.hashed import HashedBlockCache
from kvsched.kvcache.offload import HostTier
from kvsched.kvcache.radix import RadixCache
from kvsched.plugins import load
from kvsched.prefix import Prefix, common_prefix, extended
from kvsched.reservation import RETRACT_DECODE_STEPS
from kvsched.sequence import Seq


def identity(seq: Seq) -> Prefix:
    """`seq`'s prompt and answer as segments (private ids are negative, never a workload's)."""
    own = seq.identity
    if own is not None:
        return own
    request = seq.request
    base = request.prefix
    covered = base.num_tokens if base is not None else 0
    prompt, total = request.prompt_len, request.prompt_len + request.output_len
    more = []
    if covered < prompt:
        more.append((-2 * seq.index - 1, prompt - covered))
        covered = prompt
    if covered < total:
        more.append((-2 * seq.index - 2, total - covered))
    own = seq.identity = extended(base, tuple(more))
    return own


class PrefixTracker:
    """Drives a prefix cache (vLLM's hashed blocks or SGLang's radix tree) alongside the
    scheduler's block counts."""

    __slots__ = ("cache", "hashed", "radix", "pool", "block_size", "eager", "lagged", "stepped",
                 "v0", "_evicted_seen", "_computed", "_middle", "_fresh", "host",
                 "host_first_tokens", "host_tokens")

    def __init__(self, cache: KVCache, pool: BlockPool,
                 host: HostTier | None = None) -> None:
        self.cache = cache
        # the same cache when it is vLLM's hashed blocks or the radix tree, typed: the
        # compiled build calls it directly, not through Python's method dispatch (a decode
        # pass calls it for each request that crosses a block; a page-of-one pool, every pass)
        self.hashed = cache if isinstance(cache, HashedBlockCache) else None
        self.radix = cache if isinstance(cache, RadixCache) else None
        self.pool = pool
        # A host tier under the cache (`engine.kv_offload`): what it evicts goes there.
        self.host = host
        cache.spill = host
        self.host_first_tokens = 0  # tokens loaded from host at requests' first admissions
        self.host_tokens = 0  # at every admission
        self.block_size = cache.block_size
        self._evicted_seen = 0
        # vLLM (the hashed cache) hashes a block of generated tokens in the step that fills it
        # and keeps a preempted request's blocks cached (RULES.md P4, P7); SGLang (the radix
        # tree) inserts decoded tokens when the request finishes, and a retraction frees
        # them without inserting them.
        self.eager = cache.commits_running
        # vLLM's async scheduling hashes such a block a step later, when the request takes
        # its next block: the token that completes it is still in flight when the step that
        # computes it is decided (its num_tokens lags), RULES.md A5.
        self.lagged = False
        # SGLang's scheduler (the `sglang` preset with the radix tree) takes a prefill's pages
        # after the round and a decode pass's after its retractions, and inserts what a step
        # computed after it (conformance/SGLANG_RULES.md S18-S21); set by the scheduler.
        self.stepped = False
        self._computed: list[tuple[Seq, int]] = []  # the radix tree's step: chunks to insert
        self._middle: list[tuple[Seq, int]] = []  # a middle chunk, inserted at the next step
        # vLLM V0 hashes a prompt's full blocks when it allocates them, and a later
        # allocation of the same blocks shares them at once, but its count of cached tokens
        # sees them only once the schedule() that hashed them ends
        # (PrefixCachingBlockAllocator's touched blocks, marked computed after the batch is
        # built): `_fresh` holds this step's newly hashed runs (chain, first new block).
        self.v0 = False
        self._fresh: list[tuple[Prefix, int]] = []

    def _tree(self) -> RadixCache:
        """The radix tree (the `sglang` preset's cache, `stepped`)."""
        tree = self.radix
        assert tree is not None
        return tree

    # -- the read-only view (CacheView) ------------------------------------------------

    @property
    def num_free(self) -> int:
        return self._free()

    @property
    def num_cached(self) -> int:
        return self.blocks_cached()

    def blocks_cached(self) -> int:
        """`num_cached` as the compiled engine reads it after every decode pass: a C call,
        not a Python property (an attribute lookup there)."""
        hashed = self.hashed
        if hashed is not None:
            return hashed.cached
        radix = self.radix
        if radix is not None:
            return radix.blocks_cached()
        return self.cache.num_cached

    def _free(self) -> int:
        """The cache's free blocks (what the pool's free count follows)."""
        hashed = self.hashed
        return hashed.blocks_free() if hashed is not None else self.cache.num_free

    def _commit(self, seq: Seq, num_tokens: int, prompt_tokens: int = 0) -> None:
        """`KVCache.commit` of `seq`'s first `num_tokens` tokens."""
        hashed = self.hashed
        if hashed is not None:
            hashed.commit(seq.index, identity(seq), num_tokens, prompt_tokens)
        else:
            self.cache.commit(seq.index, identity(seq), num_tokens, prompt_tokens)

    def match(self, seq: Seq, admission: bool = False, whole: bool = False) -> int:
        """Tokens of `seq`'s next (re)prefill cached now: whole blocks, at most all but one
        (`whole`, vLLM V0's count: all its full blocks, with the hashed cache).
        `admission`: the round tries `seq` (SGLang's match then splits the node it ends in)."""
        if admission and self.stepped:
            return self._tree().match(identity(seq), seq.prompt_len + seq.generated, True)
        if whole and self.eager:
            return self.cache.match(identity(seq), seq.prompt_len + seq.generated, True)
        return self.cache.match(identity(seq), seq.prompt_len + seq.generated)

    def refresh(self, seqs: list[Seq]) -> None:
        """SGLang's `_touch_waiting_prefixes`: each waiting request's whole sequence touched,
        the head last (the radix tree only)."""
        cache = self._tree()
        for seq in reversed(seqs):
            cache.touch(identity(seq), seq.prompt_len + seq.generated)

    def host_extend(self, seq: Seq, hit: int) -> int:
        """Tokens past a GPU hit of `hit` tokens that the host tier holds, in a row, whole
        blocks, so that at most all but the last token is found (0 without a host tier)."""
        host = self.host
        if host is None:
            return 0
        size = self.block_size
        limit = (seq.prompt_len + seq.generated - 1) // size
        return host.run(identity(seq), hit // size, limit) * size

    def host_load(self, seq: Seq, hit: int, tokens: int, first: bool) -> None:
        """`tokens` past the GPU hit are read back from host (`first`: at the request's first
        admission): counted, the host's copies refreshed."""
        host = self.host
        assert host is not None
        size = self.block_size
        host.load(identity(seq), hit // size, tokens // size)
        self.host_tokens += tokens
        if first:
            self.host_first_tokens += tokens

    # -- what the scheduler does -----------------------------------------------------------

    def hit_cost(self, seq: Seq, hit: int) -> int:
        """Free blocks the hit takes (hit blocks no running request holds)."""
        return self.cache.idle_hits(identity(seq), hit) if hit else 0

    def admit(self, seq: Seq, hit: int, fresh: int) -> None:
        if self.stepped:  # SGLang takes a prefill's pages chunk by chunk, after the round
            self._tree().promise(seq.index, identity(seq), hit, fresh)
        else:
            self.cache.allocate(seq.index, identity(seq), hit, fresh)
        self.pool.free = self._free()

    def grow(self, seq: Seq, fresh: int) -> None:
        if self.stepped:  # SGLang: taken by the pass's decode_pass, after its retractions
            self._tree().grow_promise([seq.index] * fresh)
        else:
            self.cache.allocate(seq.index, None, 0, fresh)
        self.pool.free = self._free()

    def grow_each(self, seqs: list[Seq]) -> None:
        """`grow(seq, 1)` for each of `seqs` (a decode pass's block boundaries, their
        `blocks` counting the new one): taken at once, the same blocks and evictions as one
        by one; `lagged`, each then caches the block before its new one."""
        hashed = self.hashed
        if self.stepped:
            self._tree().grow_promise([seq.index for seq in seqs])
        else:
            if hashed is not None:  # its grow_each, without a list of ids
                hashed.take_fresh(len(seqs))
                for seq in seqs:
                    hashed.grow_tail(seq.index)
            else:
                self.cache.grow_each([seq.index for seq in seqs])
            if self.lagged:
                size = self.block_size
                for seq in seqs:
                    self._commit(seq, (seq.blocks - 1) * size)
        self.pool.free = self._free()

    def decode_pass(self, num_decodes: int) -> None:
        """A decode pass of `num_decodes` requests ends its retractions (the radix tree:
        its pages are taken, SGLang's `prepare_for_decode`)."""
        if self.stepped:
            self._tree().decode_pass(num_decodes)
            self.pool.free = self._free()

    def passes_fit(self, num_decodes: int, num_blocks: int) -> bool:
        """Whether SGLang's radix tree gives `num_blocks` blocks to decode passes of
        `num_decodes` requests with none of them evicting, nor the pass after them: then
        `grow_passes` takes them in one move (False for vLLM's hashed cache)."""
        if not self.stepped:
            return False
        size = self.block_size
        return self._tree().available_tokens - num_blocks * size >= num_decodes * size

    def grow_passes(self, crossed: list[tuple[int, int]]) -> None:
        """Decode passes that `passes_fit`, in one move: each (request index, blocks) takes
        its blocks as `grow_each` and `decode_pass` would pass by pass."""
        tree = self._tree()
        tree.grow_passes(crossed)
        self.pool.free = tree.num_free

    def decode_evicts(self, num_decodes: int) -> bool:
        """Whether SGLang's next decode pass of `num_decodes` requests evicts."""
        return self.stepped and self._tree().decode_evicts(num_decodes)

    def shrink(self, seq: Seq, blocks: int) -> None:
        self.cache.shrink(seq.index, blocks)
        self.pool.free = self._free()

    def computed(self, seq: Seq, num_tokens: int) -> None:
        """`seq`'s first `num_tokens` tokens are (being) computed: its full blocks are cached
        (in a radix tree at the end of the step, `settle`; tokens another request inserted
        first go back to the pool)."""
        if self.stepped:
            self._tree().computed(seq.index, num_tokens)
            self._computed.append((seq, num_tokens))
        elif self.v0:
            chain = identity(seq)
            cache = self.cache
            before = cache.match(chain, num_tokens, True) // self.block_size
            cache.commit(seq.index, chain, num_tokens)
            if num_tokens // self.block_size > before:
                self._fresh.append((chain, before))
            self.pool.free = self._free()
        else:
            self._commit(seq, num_tokens)
            self.pool.free = self._free()

    def computed_count(self, seq: Seq, hit: int) -> int:
        """vLLM V0's cached tokens of `seq` whose `hit` is cached now: those hashed before
        this step (blocks hashed in it are not computed yet for its count)."""
        size = self.block_size
        mine = identity(seq).segments
        for chain, first in self._fresh:
            if hit > first * size and common_prefix(mine, chain.segments) // size > first:
                hit = first * size
        return hit

    def step_ended(self) -> None:
        """The end of vLLM V0's schedule(): what it hashed counts as computed from now on."""
        self._fresh.clear()

    def stash(self) -> None:
        """The start of a step with the radix tree: the chunked request's last chunk joins
        the tree (SGLang's `stash_chunked_request`, scheduler.py line 3772)."""
        cache = self._tree()
        for seq, num_tokens in self._middle:
            cache.commit(seq.index, identity(seq), num_tokens, seq.prompt_len)
        self._middle.clear()
        self.pool.free = cache.num_free

    def settle(self, releases: list[Seq]) -> None:
        """The end of a step with the radix tree, as SGLang's `process_batch_result`: the
        step's chunks take their pages (evicting what they lack), then in the batch's order
        a request that finished inserts all it computed and leaves, one whose prefill
        completed inserts it; the finishes of a decode pass in admission order. A middle
        chunk waits for the next step (`stash`)."""
        cache = self._tree()
        cache.materialize()
        middle = self._middle
        finished = set(releases)
        for seq, num_tokens in self._computed:
            if seq in finished:
                finished.discard(seq)
                self.release(seq, seq.prompt_len + seq.output_len - 1)
            elif seq.prefill_left:
                middle.append((seq, num_tokens))
            else:
                cache.commit(seq.index, identity(seq), num_tokens, seq.prompt_len)
        self._computed.clear()
        if finished:
            for seq in sorted(finished, key=_admission):
                self.release(seq, seq.prompt_len + seq.output_len - 1)
        releases.clear()
        self.pool.free = cache.num_free

    def filled(self, seq: Seq) -> None:
        """A decode pass fills `seq`'s last block: vLLM caches it in that step (`lagged`:
        in the step that takes the next block, `grow_each`)."""
        if not self.lagged:
            self._commit(seq, seq.blocks * self.block_size)

    def filled_each(self, seqs: list[Seq]) -> None:
        """`filled` for each of `seqs`, in their order."""
        if self.lagged:
            return
        size = self.block_size
        for seq in seqs:
            self._commit(seq, seq.blocks * size)

    def release(self, seq: Seq, computed: int) -> None:
        """`seq` stops running with `computed` tokens of KV: cache them, free its blocks."""
        self._commit(seq, computed, seq.prompt_len)
        self.cache.free(seq.index)
        self.pool.free = self._free()

    def preempted(self, seq: Seq, computed: int, remaining: int = 0,
                  retraction: bool = False) -> None:
        """`seq` is preempted with `computed` tokens of KV: free its blocks (the hashed cache
        keeps them cached, the radix tree only what was inserted). SGLang's scheduler then
        evicts what the pool lacks for 20 tokens per request left in the batch (`remaining`);
        a `retraction` of a decode pass comes after `check_decode_mem` evicted all it could."""
        if self.stepped:
            tree = self._tree()
            if retraction:
                tree.evict_all()
            tree.retract(seq.index, remaining * RETRACT_DECODE_STEPS)
        else:
            if self.eager:
                self._commit(seq, computed)
            self.cache.free(seq.index)
        self.pool.free = self._free()

    def take_evicted(self) -> int:
        """Cached blocks evicted since the last call (a step's `evicted_blocks`)."""
        hashed = self.hashed
        total = hashed.evicted if hashed is not None else self.cache.evicted_blocks
        evicted = total - self._evicted_seen
        self._evicted_seen = total
        return evicted


def _admission(seq: Seq) -> int:
    return seq.admit_seq


def make_tracker(config: EngineConfig, pool: BlockPool) -> PrefixTracker | None:
    """The prefix cache `config` asks for, tracked beside `pool`; None without caching."""
    if not config.enable_prefix_caching:
        return None
    host = (HostTier(config.kv_offload_blocks, config.block_size) if config.kv_offload_blocks
            else None)
    kind = load(PREFIX_CACHES[config.prefix_cache][0])
    return PrefixTracker(kind(config.usable_blocks, config.block_size), pool, host)
