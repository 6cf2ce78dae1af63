"""The policy protocols: a policy orders the waiting queue, nothing else.

A static policy (`StaticPolicy`) returns a sort key for a request entering the waiting queue;
smaller keys are served first, and the queue breaks ties by entry order, so every order is
deterministic. Budgets, blocks and preemption stay in the scheduler.

Keys are computed once, when a request enters the queue. Aging still works: when every
waiting request ages at the same linear rate, `base_key - aging * (now - enqueue_time)`
orders requests exactly as the constant `base_key + aging * enqueue_time` does.

A dynamic policy (`DynamicPolicy`, any class with an `order` method) re-ranks the whole
never-started part of the queue at the start of every step, as SGLang re-sorts its waiting
list from the radix cache before each prefill: what a request will hit changes as the cache
fills and evicts, so no key fixed at entry can follow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from kvsched.request import Request

if TYPE_CHECKING:
    from kvsched.kvcache.base import CacheView
    from kvsched.sequence import Seq

SortKey = tuple[float, ...]


@runtime_checkable
class StaticPolicy(Protocol):
    """Orders the waiting queue by a key fixed at entry. `enqueue_time` is the arrival
    time, or the re-entry time of a preempted request when `requeue` is `back`."""

    def key(self, request: Request, enqueue_time: float) -> SortKey: ...


@runtime_checkable
class DynamicPolicy(Protocol):
    """Re-ranks the waiting requests every step.

    `seqs` is the part of the queue in policy order (never started, or preempted and
    requeued `back` or by arrival; not the preempted stack nor the swapped FIFO ahead of
    it), in its current order: last step's order, then those that entered since, in entry
    order (`seq.enqueue_time` says when each entered). `view` is the engine's KV cache
    (`view.match(seq)`: tokens of the request's next (re)prefill cached now), or None when
    prefix caching is off. The result holds exactly the same requests, first served first;
    the policy reads the requests, it never changes them or the cache.
    """

    def order(self, seqs: list[Seq], now: float, view: CacheView | None) -> list[Seq]: ...


Policy: TypeAlias = StaticPolicy | DynamicPolicy  # what the engine takes: either kind


def is_dynamic(policy: object) -> bool:
    """Whether `policy` re-ranks the queue every step (it has an `order` method)."""
    return callable(getattr(policy, "order", None))
