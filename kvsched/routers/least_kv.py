"""least_kv: the replica with the most free KV blocks (ties: fewest outstanding, then lowest
index)."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.routers.base import EngineView, RouterBase, RouteRequest


class LeastKv(RouterBase):
    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        return min(replicas,
                   key=lambda v: (-v.num_free_blocks, v.num_outstanding, v.index)).index
