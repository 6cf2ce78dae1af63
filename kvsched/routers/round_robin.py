"""round_robin: replica 0, 1, ..., N-1, 0, ... in arrival order, whatever their load."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.routers.base import EngineView, RouterBase, RouteRequest


class RoundRobin(RouterBase):
    def __init__(self) -> None:
        self._next = 0

    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        choice = self._next % len(replicas)
        self._next = choice + 1
        return choice
