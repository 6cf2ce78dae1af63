"""prefix_aware: the replica holding the longest cached prefix of the prompt, unless its load
(queued + running) exceeds the least-loaded replica's by more than `margin` requests; then
the least-loaded (as the SGLang router and llm-d balance cache hits against load).

Without prefix caching on the replicas (or prefix identity in the workload) every replica
reports a 0-token hit and this router takes the least-loaded one (as least_outstanding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvsched.routers.base import EngineView, RouterBase, RouteRequest, least_loaded


@dataclass
class PrefixAware(RouterBase):
    margin: int = 8  # requests of extra load a cache hit is worth

    def __post_init__(self) -> None:
        if isinstance(self.margin, bool) or not isinstance(self.margin, int) or self.margin < 0:
            raise ValueError(f"margin: expected an integer >= 0, got {self.margin!r}")

    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        least = least_loaded(replicas)
        hits = [view.cached_prefix_len(request) for view in replicas]
        best = min(replicas,
                   key=lambda v: (-hits[v.index], v.num_outstanding, v.index)).index
        if hits[best] == 0:
            return least
        gap = replicas[best].num_outstanding - replicas[least].num_outstanding
        return least if gap > self.margin else best
