"""Longest prefix match first (SGLang's `lpm`): the requests the cache helps most go first."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.kvcache.base import CacheView
from kvsched.policies.prefix_match import (
    CHECK_THRESHOLD,
    DEPRIORITIZE_THRESHOLD,
    FCFS_ABOVE,
    check_thresholds,
    deprioritized,
    matches,
)
from kvsched.sequence import Seq


@dataclass(frozen=True, slots=True)
class LongestPrefixMatch:
    """Most cached tokens first, re-ranked every step; ties keep the queue's order.

    As SGLang 0.5.23 (`schedule_policy.py`: `_determine_active_policy`,
    `_compute_prefix_matches`, `_sort_by_longest_prefix`): with more than `fcfs_above`
    waiting it does not sort at all (the queue keeps its last order, newcomers at the tail);
    otherwise a stable sort by `-cached tokens`, except that the in-batch prefix check
    (`check_threshold`, `deprioritize_threshold`, see `prefix_match.deprioritized`) sends
    cold requests sharing a prefix with an earlier cold one to the back. Without prefix
    caching it is FCFS, as SGLang turns cache-aware policies into `fcfs` when the radix
    cache is off. Cache-cold requests can starve behind a stream of hot ones (sglang issue
    #31954).

    `aging` (tokens per time unit of waiting; 0 = SGLang as shipped): the effective match is
    `cached + aging * waiting_time`, as the aging proposed in sglang PR #31723 (there counted
    per scheduling pass, which is per step on the step clock). Deprioritised requests stay
    at the back.
    """

    check_threshold: int = CHECK_THRESHOLD
    deprioritize_threshold: int = DEPRIORITIZE_THRESHOLD
    fcfs_above: int = FCFS_ABOVE
    aging: float = 0.0

    def __post_init__(self) -> None:
        check_thresholds(self.check_threshold, self.deprioritize_threshold, self.fcfs_above)
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def order(self, seqs: list[Seq], now: float, view: CacheView | None) -> list[Seq]:
        if view is None or len(seqs) > self.fcfs_above:
            return seqs
        cached = matches(seqs, view)
        later = deprioritized(seqs, cached, self.check_threshold, self.deprioritize_threshold)
        aging = self.aging
        keys = [float("inf") if i in later else -(hit + aging * (now - seq.enqueue_time))
                for i, (seq, hit) in enumerate(zip(seqs, cached, strict=True))]
        return [seqs[i] for i in sorted(range(len(seqs)), key=keys.__getitem__)]
