"""What a router sees and what it must do.

A router picks, for each arriving request, the replica it goes to. It sees the request
without its output length (`RouteRequest`) and each replica through a read-only
`EngineView`: queue lengths, running requests, free KV blocks and a cached-prefix lookup,
as of the arrival (or `signal_delay` seconds earlier), never the future.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from kvsched.prefix import Prefix


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A request as a router may see it: everything but its true output length."""

    request_id: str
    arrival_time: float
    prompt_len: int
    priority: int
    class_name: str | None
    session: str | None
    prefix: Prefix | None = None  # the prompt's shared tokens, as the workload names them


@dataclass(frozen=True, slots=True)
class EngineView:
    """One replica as a router sees it (read-only: a snapshot, changing it is an error).

    `num_waiting` counts requests queued on the replica, those routed there but not yet
    taken in by its next step included; `num_running` the requests in its batch (decoding
    or mid-prefill); `num_free_blocks` its free KV blocks. Queues and blocks are as its
    current batch runs: a batch's finishes show once it ends.
    """

    index: int
    num_blocks: int
    num_waiting: int
    num_running: int
    num_free_blocks: int
    prefix: PrefixLookup | None = field(default=None, repr=False, compare=False)

    @property
    def num_outstanding(self) -> int:
        """Requests queued or running: the load `least_outstanding` balances."""
        return self.num_waiting + self.num_running

    def cached_prefix_len(self, request: RouteRequest) -> int:
        """Tokens of `request`'s prompt this replica holds in its prefix cache (whole blocks,
        as its admission would hit them now); 0 without prefix caching or prefix identity.
        The lookup is live even under `signal_delay`, which delays the load figures only."""
        return 0 if self.prefix is None else self.prefix(request)


class PrefixLookup(Protocol):
    def __call__(self, request: RouteRequest) -> int: ...


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
    return min(replicas, key=lambda v: (v.num_outstanding, v.index)).index
