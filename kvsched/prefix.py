"""Prefix identity without token lists: a request's tokens as a chain of segments.

A segment is a run of tokens named by an integer id and a length: two requests share their
first N tokens exactly when their segment lists agree that far (same ids, and within a
differing segment, only as far as the shorter run of the same id). A shared system prompt
is one segment of the group; a multi-turn session's next prompt is the previous prompt's
segments + its answer + new user tokens; a Mooncake `hash_ids` entry is a segment of 512
tokens. From segments come the hashes of full KV blocks (a block is identified by its
parent's hash and its own tokens, as vLLM hashes them) and the pieces a radix tree needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

Segment = tuple[int, int]  # (segment id, number of tokens)

_ROOT = 0x6B76  # the parent hash of a first block


class Prefix:
    """A request's token sequence as segments (prompt and, where the workload knows them,
    the answer's tokens too). Immutable; equal (and hashed) by its segments.

    A plain class with slots, not a frozen dataclass: every request's identity is one
    (`kvsched.kvcache.tracker.identity`), and the dataclass's generated `__init__` (its
    fields set through `object.__setattr__`) cost 1.4 us each; compiled, its fields are C
    fields."""

    __slots__ = ("segments", "_memo", "_at", "_at_start", "num_tokens")

    def __init__(self, segments: tuple[Segment, ...]) -> None:
        total = 0
        for seg_id, length in segments:
            if length < 1:
                raise ValueError(f"segment {seg_id} has {length} tokens; expected >= 1")
            total += length
        self._fill(tuple(segments), total)

    def _fill(self, segments: tuple[Segment, ...], num_tokens: int) -> None:
        """Set a new prefix's fields: `segments`, which hold `num_tokens` tokens."""
        self.segments = segments
        # block size -> hashes of every full block (a request's identity is hashed once)
        self._memo: dict[int, list[int]] = {}
        # the segment the last lookup found and its first token (`_segment_at` starts there)
        self._at = 0
        self._at_start = 0
        self.num_tokens = num_tokens  # (asked on every cache lookup)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prefix):
            return NotImplemented
        return self.segments == other.segments

    def __hash__(self) -> int:
        return hash((self.segments,))  # (the frozen dataclass's hash, as it was)

    def __repr__(self) -> str:
        return f"Prefix(segments={self.segments!r})"

    def pieces(self, upto: int) -> Iterator[tuple[int, int, int]]:
        """(segment id, first offset, end offset) covering the first `upto` tokens."""
        left = upto
        for seg_id, length in self.segments:
            if left <= 0:
                return
            take = min(length, left)
            yield seg_id, 0, take
            left -= take

    def block_hashes(self, block_size: int, upto: int | None = None) -> list[int]:
        """Hashes of the full blocks among the first `upto` tokens (all by default): block k's
        hash covers its parent's hash and the (segment, offsets) pieces it holds. Computed
        once per block size; a call costs a slice after that."""
        hashes = self._memo.get(block_size)
        if hashes is None:
            hashes = self._memo[block_size] = self._hash_blocks(block_size, self.num_tokens)
        if upto is None or upto >= self.num_tokens:
            return hashes
        return hashes[:max(0, upto) // block_size]

    def _locate(self, token: int) -> tuple[int, int]:
        """The index of the segment holding token `token`, and the token's offset in it."""
        i = _segment_at(self, token)
        return i, token - self._at_start

    def token_key(self, token: int) -> tuple[int, int]:
        """Token `token` as (segment id, offset): two prefixes that agree before it hold the
        same token there exactly when its keys are equal."""
        i, offset = self._locate(token)
        return self.segments[i][0], offset

    def block_key(self, block_size: int, position: int) -> tuple:
        """The tokens of block `position` as a key: two prefixes that agree before this block
        hold the same block exactly when its keys are equal ((segment id, first offset) for a
        block inside one segment, else its (segment id, start, end) pieces)."""
        return block_key(self, block_size, position)

    def _hash_blocks(self, block_size: int, total: int) -> list[int]:
        hashes: list[int] = []
        parent = _ROOT
        block: list[tuple[int, int, int]] = []
        room = block_size
        for seg_id, start, end in self.pieces(total):
            if room == block_size and end - start >= block_size:
                # Whole blocks inside one segment (most of a long prompt): one piece each.
                # (A block of several pieces hashes a tuple of tuples: never the same form.)
                stop = end - (end - start) % block_size
                for first in range(start, stop, block_size):
                    parent = hash((parent, seg_id, first))
                    hashes.append(parent)
                start = stop
            while start < end:
                take = min(room, end - start)
                block.append((seg_id, start, start + take))
                start += take
                room -= take
                if not room:
                    parent = hash((parent, tuple(block)))
                    hashes.append(parent)
                    block, room = [], block_size
        return hashes


def _made(segments: tuple[Segment, ...], num_tokens: int) -> Prefix:
    """A prefix of segments made here, known to be valid and to hold `num_tokens` tokens
    (not checked and summed again, as `Prefix()` does)."""
    out = Prefix.__new__(Prefix)
    out._fill(segments, num_tokens)
    return out


def extended(prefix: Prefix | None, more: tuple[Segment, ...]) -> Prefix:
    """A new prefix: `prefix`'s segments, then `more`'s (a request's identity: its workload
    prefix and its own tokens). Only `more` is checked and summed, `prefix` was when made."""
    out = Prefix(more)
    if prefix is not None:
        out.segments = prefix.segments + out.segments
        out.num_tokens += prefix.num_tokens
    return out


def _segment_at(prefix: Prefix, token: int) -> int:
    """The index of the segment holding token `token` (the last one past the end): a scan
    from the segment the last lookup found, or from the first for a token before it. The
    caches look up tokens further and further on (a walk goes down its path), so a lookup
    costs a step or two, and no list of each segment's first token is built per prefix
    (a request's identity is looked up a few times in its life)."""
    segments = prefix.segments
    last = len(segments) - 1
    i = prefix._at
    start = prefix._at_start
    if token < start:
        i = start = 0
    segment = segments[i]
    length = segment[1]
    while i < last and token >= start + length:
        start += length
        i += 1
        segment = segments[i]
        length = segment[1]
    prefix._at = i
    prefix._at_start = start
    return i


def block_key(prefix: Prefix, block_size: int, position: int) -> tuple:
    """`prefix.block_key(block_size, position)` (the caches call this, a C call in the
    compiled build)."""
    segments = prefix.segments
    token = position * block_size
    i = _segment_at(prefix, token)
    offset = token - prefix._at_start
    seg_id, length = segments[i]
    if offset + block_size <= length:
        return seg_id, offset
    pieces = []
    left = block_size
    while left:
        seg_id, length = segments[i]
        take = min(length - offset, left)
        pieces.append((seg_id, offset, offset + take))
        left -= take
        i += 1
        offset = 0
    return tuple(pieces)


def common_prefix(a: Sequence[Segment], b: Sequence[Segment]) -> int:
    """Tokens two segment lists share from the start."""
    shared = 0
    for i in range(min(len(a), len(b))):
        segment = a[i]
        if segment is b[i]:  # one tuple (a trace's block, shared by every prompt holding it)
            len_a = segment[1]
            shared += len_a
            continue
        id_a, len_a = segment
        id_b, len_b = b[i]
        if id_a != id_b:
            break
        shared += min(len_a, len_b)
        if len_a != len_b:
            break
    return shared


class Blocks:
    """Prompts named block by block (a trace's `hash_ids`, Mooncake's): id `b` is segment
    `base | b` of `block_size` tokens, one tuple per distinct full block (kept, and shared by
    every prefix that holds it), the last block cut to the prompt where the ids reach its end.

    A plain class with slots (compiled: a cdef class): a trace's 12,031 prompts hold 288,500
    ids, and the compiled loop over them costs a third of the interpreted one."""

    __slots__ = ("block_size", "base", "max_id", "full")

    def __init__(self, block_size: int, base: int, max_id: int) -> None:
        self.block_size = block_size
        self.base = base
        self.max_id = max_id
        self.full: dict[int, Segment] = {}

    def prefix(self, ids: list, prompt_len: int) -> Prefix | None:
        """The first len(ids) blocks of a `prompt_len`-token prompt (None for no ids). The
        caller has checked that they do not go past it; an id that is not a whole number
        0..max_id raises ValueError(id)."""
        n = len(ids)
        if not n:
            return None
        # (compiled: Python ints, which the ids are compared with and segments hold as they
        # are, not made per id)
        size, max_id = self.block_size, self.max_id
        base, full = self.base, self.full
        chain = []
        for i in range(n):
            item = ids[i]
            if type(item) is not int or item < 0 or item > max_id:
                raise ValueError(item)
        for i in range(n - 1):
            item = ids[i]
            segment = full.get(item)
            if segment is None:
                b = item  # (compiled: the id as a C integer)
                segment = full[item] = (base | b, size)
            chain.append(segment)
        item = ids[n - 1]
        last = prompt_len - size * (n - 1)
        if last < size:  # the prompt ends inside its last block
            b = item
            segment = (base | b, last)
        else:
            last = size
            segment = full.get(item)
            if segment is None:
                b = item
                segment = full[item] = (base | b, size)
        chain.append(segment)
        return _made(tuple(chain), size * (n - 1) + last)
