"""Highest response ratio next: shortest uncached prefill first, but waiting raises a request."""

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
    prefill_len,
)
from kvsched.sequence import Seq


@dataclass(frozen=True, slots=True)
class HighestResponseRatio:
    """Highest `(wait + service) / service` first, re-ranked every step.

    `service` is the prefill still to compute: the tokens of the next (re)prefill minus
    those cached now (`prompt - cached`), never the output length, which a scheduler does
    not know. Service in tokens times any constant time per token gives the same order
    (the ratio is `1 + wait / service`), so no speed is assumed: the rank is
    `wait / uncached tokens`, highest first; ties (e.g. everyone just arrived) by entry
    time, then arrival order. A short prompt goes first, but a long one that has waited
    long enough overtakes fresh short ones, so nobody starves; a fully cached prefill (no
    work) goes first of all.

    SGLang 0.5.23 ships an `hrrn` too (PR #32911, `_sort_by_hrrn`); it measures the wait in
    prefill tokens processed since arrival rather than in time, which orders alike while
    throughput is steady. As there, with more than `fcfs_above` waiting the queue is not
    sorted, and the in-batch prefix check sends cold requests that share a prefix with an
    earlier cold one to the back (only with a cache: without one sharing saves nothing).
    """

    check_threshold: int = CHECK_THRESHOLD
    deprioritize_threshold: int = DEPRIORITIZE_THRESHOLD
    fcfs_above: int = FCFS_ABOVE

    def __post_init__(self) -> None:
        check_thresholds(self.check_threshold, self.deprioritize_threshold, self.fcfs_above)

    def order(self, seqs: list[Seq], now: float, view: CacheView | None) -> list[Seq]:
        if len(seqs) > self.fcfs_above:
            return seqs
        if view is None:
            cached = [0] * len(seqs)
            later: set[int] = set()
        else:
            cached = matches(seqs, view)
            later = deprioritized(seqs, cached, self.check_threshold,
                                  self.deprioritize_threshold)

        def key(i: int) -> tuple[bool, float, float, int]:
            seq = seqs[i]
            uncached = prefill_len(seq) - cached[i]
            ratio = (now - seq.enqueue_time) / uncached if uncached > 0 else float("inf")
            return (i in later, -ratio, seq.enqueue_time, seq.index)

        return [seqs[i] for i in sorted(range(len(seqs)), key=key)]
