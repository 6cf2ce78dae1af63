"""What a router sees and what it must do.

A router picks, for each arriving request, the replica it goes to. It sees the request
without its output length (`RouteRequest`) and each replica through a read-only
`EngineView`: queue lengths, running requests, free KV blocks and a cached-prefix lookup,
as of the arrival (or `signal_delay` seconds earlier), never the future.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from kvsched.engine.view import EngineView as EngineView  # (a router's view: its home)
from kvsched.engine.view import PrefixLookup as PrefixLookup
from kvsched.prefix import Prefix


class RouteRequest(NamedTuple):
    """A request as a router may see it: everything but its true output length.

    A named tuple, not a frozen dataclass (as `EngineView`): a cluster makes one per
    arrival, and the loop makes it in one C call (`tuple.__new__`) where a frozen
    dataclass sets each of its seven fields through `object.__setattr__`."""

    request_id: str
    arrival_time: float
    prompt_len: int
    priority: int
    class_name: str | None
    session: str | None
    prefix: Prefix | None = None  # the prompt's shared tokens, as the workload names them


@runtime_checkable
class Router(Protocol):
    """`route` returns the index of the replica (0-based, into `replicas`) that serves
    `request`. It may keep state (a cursor, a session table) but must be deterministic given
    the seeded `rng` it is bound with."""

    def route(self, request: RouteRequest, replicas: Sequence[EngineView]) -> int: ...


class RouterBase:
    """Optional base: `bind` hands the router the replica count and its seeded generator
    before the first request (routers that need neither may ignore it)."""

    num_replicas: int = 0
    rng: np.random.Generator | None = None

    def bind(self, num_replicas: int, rng: np.random.Generator) -> None:
        self.num_replicas = num_replicas
        self.rng = rng


def least_loaded(replicas: Sequence[EngineView]) -> int:
    """The replica with the fewest outstanding requests; ties to the lowest index."""
    best = replicas[0]
    least = best.num_waiting + best.num_running
    for view in replicas:  # (a loop: min() with a key tuple per view costs twice as much)
        load = view.num_waiting + view.num_running  # num_outstanding, without its call
        if load < least or (load == least and view.index < best.index):
            best, least = view, load
    return best.index
