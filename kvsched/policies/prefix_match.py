"""What waiting requests share, with the cache and with each other: the pieces SGLang's
cache-aware policies are built from (`schedule_policy.py`, `SchedulePolicy`).

A request's tokens are named by its prefix segments (`kvsched.prefix`); tokens beyond them
are its own and shared with nobody. Its next (re)prefill covers `prompt_len + generated`
tokens (SGLang matches `origin_input_ids + output_ids`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.kvcache.base import CacheView
from kvsched.prefix import Segment
from kvsched.sequence import Seq

# SGLang's IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD and ..._DEPRIORITIZE_THRESHOLD (tokens)
# and the queue length above which lpm and hrrn stop sorting (`_determine_active_policy`).
CHECK_THRESHOLD = 32
DEPRIORITIZE_THRESHOLD = 32
FCFS_ABOVE = 128


def prefill_len(seq: Seq) -> int:
    """Tokens of `seq`'s next (re)prefill."""
    return seq.prompt_len + seq.generated


def segments(seq: Seq, upto: int) -> list[Segment]:
    """`seq`'s named tokens among its first `upto`, as segments (the last one cut short)."""
    prefix = seq.request.prefix
    if prefix is None:
        return []
    return [(seg_id, end) for seg_id, _, end in prefix.pieces(upto)]


def matches(seqs: Sequence[Seq], view: CacheView) -> list[int]:
    """Cached tokens of each request's next (re)prefill (SGLang's `prefix_indices`)."""
    return [view.match(seq) for seq in seqs]


class _Trie:
    """The waiting requests already examined (SGLang's `waiting_queue_radix_tree`), over
    whole segments: a child per (segment id, length), and per segment id the longest one
    seen, for a query that shares only part of a segment."""

    __slots__ = ("children", "longest")

    def __init__(self) -> None:
        self.children: dict[Segment, _Trie] = {}
        self.longest: dict[int, int] = {}

    def match(self, segs: Sequence[Segment]) -> int:
        """The most tokens `segs` shares from the start with one inserted sequence."""
        node, shared = self, 0
        for seg_id, length in segs:
            child = node.children.get((seg_id, length))
            if child is None:
                return shared + min(length, node.longest.get(seg_id, 0))
            shared += length
            node = child
        return shared

    def insert(self, segs: Sequence[Segment]) -> None:
        node = self
        for seg_id, length in segs:
            if length > node.longest.get(seg_id, 0):
                node.longest[seg_id] = length
            node = node.children.setdefault((seg_id, length), _Trie())


def deprioritized(seqs: Sequence[Seq], cached: Sequence[int], check_threshold: int,
                  deprioritize_threshold: int) -> set[int]:
    """Positions of the requests SGLang's in-batch prefix check sorts last this step.

    In queue order, a request whose cached match is at most `check_threshold` tokens is
    matched against the requests examined before it (those that passed the check and were
    not deprioritised themselves): if it shares at least `deprioritize_threshold` tokens with
    one of them, it waits; otherwise it joins them. Of several cold requests with a common
    prefix only the first is prefilled now, and the others then find it in the cache.
    `check_threshold` -1 turns the check off, as in SGLang.
    """
    later: set[int] = set()
    if check_threshold < 0:
        return later
    seen = _Trie()
    for i, (seq, hit) in enumerate(zip(seqs, cached, strict=True)):
        if hit > check_threshold:
            continue
        segs = segments(seq, prefill_len(seq))
        if seen.match(segs) >= deprioritize_threshold:
            later.add(i)
        else:
            seen.insert(segs)
    return later


def check_thresholds(check_threshold: int, deprioritize_threshold: int,
                     fcfs_above: int) -> None:
    """Refuse thresholds that are not whole token (or request) counts."""
    for name, value, low in (("check_threshold", check_threshold, -1),
                             ("deprioritize_threshold", deprioritize_threshold, 0),
                             ("fcfs_above", fcfs_above, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
