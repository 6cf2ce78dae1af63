"""First come, first served: never starves anyone, suffers head-of-line blocking."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.policies.base import SortKey
from kvsched.request import Request


@dataclass(frozen=True, slots=True)
class Fcfs:
    """First come, first served (by arrival, then input order).

    `aging` is accepted for symmetry and changes nothing: FCFS already serves the longest
    waiter first.
    """

    aging: float = 0.0

    def __post_init__(self) -> None:
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def key(self, request: Request, enqueue_time: float) -> SortKey:
        return (enqueue_time,)
