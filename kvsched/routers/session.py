"""session: every request of a session on the replica its first request went to (sticky);
a new session, or a request without one, goes to the least-loaded replica."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched.routers.base import EngineView, RouterBase, RouteRequest, least_loaded


class Session(RouterBase):
    def __init__(self) -> None:
        self._home: dict[str, int] = {}

    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int:
        if request.session is None:
            return least_loaded(replicas)
        home = self._home.get(request.session)
        if home is None:
            home = self._home[request.session] = least_loaded(replicas)
        return home
