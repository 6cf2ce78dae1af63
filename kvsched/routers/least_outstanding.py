"""least_outstanding: the replica with the fewest requests queued + running (ties: lowest
index)."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.routers.base import EngineView, RouterBase, RouteRequest, least_loaded


class LeastOutstanding(RouterBase):
    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        return least_loaded(replicas)
