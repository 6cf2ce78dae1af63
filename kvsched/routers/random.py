"""random: a uniformly drawn replica, from a generator seeded by the scenario's seed."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.routers.base import EngineView, RouterBase, RouteRequest


class RandomRouter(RouterBase):
    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        assert self.rng is not None, "bind() the router first"
        return int(self.rng.integers(len(replicas)))
