"""Priority classes: business rules as queue order."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.policies.base import SortKey
from kvsched.request import Request


@dataclass(frozen=True, slots=True)
class PriorityFirst:
    """Lower `priority` value first (as vLLM); ties by arrival, then input order.

    `aging` (priority levels per time unit): the effective priority is
    `priority - aging * waiting_time`, so low-priority requests are eventually served.
    """

    aging: float = 0.0

    def __post_init__(self) -> None:
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def key(self, request: Request, enqueue_time: float) -> SortKey:
        return (request.priority + self.aging * enqueue_time, enqueue_time)
