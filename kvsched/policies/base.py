"""The policy protocol: a policy orders the waiting queue, nothing else.

A policy returns a sort key for a request entering the waiting queue; smaller keys are served
first, and the queue breaks ties by entry order, so every order is deterministic. Budgets,
blocks and preemption stay in the scheduler.

Keys are computed once, when a request enters the queue. Aging still works: when every
waiting request ages at the same linear rate, `base_key - aging * (now - enqueue_time)`
orders requests exactly as the constant `base_key + aging * enqueue_time` does.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kvsched.request import Request

SortKey = tuple[float, ...]


@runtime_checkable
class Policy(Protocol):
    """Orders the waiting queue. `enqueue_time` is the arrival time, or the re-entry time of
    a preempted request when `requeue` is `back`."""

    def key(self, request: Request, enqueue_time: float) -> SortKey: ...
