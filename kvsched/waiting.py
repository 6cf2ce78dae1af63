"""The waiting queue: preempted requests first (newest victim on top), then the policy's order."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

from kvsched.kvcache.base import CacheView
from kvsched.policies.base import DynamicPolicy, Policy, StaticPolicy, is_dynamic
from kvsched.sequence import Seq, SeqState

_SWAPPED = SeqState.SWAPPED  # (an enum member read through its class costs a lookup)


def admission_tokens(seq: Seq) -> int:
    """Budget tokens its admission takes: its (re)prefill, or 1 to swap in and decode."""
    return 1 if seq.state is _SWAPPED else seq.prompt_len + seq.generated


class WaitingQueue:
    """Requests waiting to be admitted.

    Preempted requests sit on a stack ahead of everything never started, the most recently
    preempted on top (the lesson: a preempted request goes to the front). The rest form a
    heap ordered by the policy's key, ties broken by entry order. Swapped-out requests may
    instead wait in a first-in-first-out queue ahead of both (vLLM V0's swapped queue).

    Under a dynamic policy (`dynamic` is True) the rest is instead a list: a request enters
    at its tail and `reorder` re-ranks the whole list in place, as SGLang sorts its waiting
    list before each prefill. Between two reorders the order stands (ties in the next sort
    keep it, and a policy that does not sort, such as `lpm` above 128 waiting, leaves it).
    """

    __slots__ = ("_policy", "_swapped", "_stack", "_heap", "_fresh", "_entries",
                 "queued_tokens", "dynamic", "size", "ties_by_id")

    def __init__(self, policy: Policy) -> None:
        self.dynamic = is_dynamic(policy)
        self._policy = policy
        self._swapped: deque[Seq] = deque()
        self._stack: list[Seq] = []
        self._heap: list[tuple] = []  # static policies: (*key, entry number, seq)
        self._fresh: deque[Seq] = deque()  # dynamic policies: never started, in policy order
        self._entries = 0
        # Ties of the policy's key by request id before entry order: vLLM V1's priority heap
        # compares (priority, arrival_time, request_id), so a preempted request re-enters
        # where it first stood, ahead of same-key requests that came in after it.
        self.ties_by_id = False
        self.queued_tokens = 0  # budget tokens needed to admit everything queued
        # Requests queued, kept as they come and go: the hot path reads it every step
        # (an attribute, not four len() calls through __len__).
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def push(self, seq: Seq, enqueue_time: float) -> None:
        """Queue `seq` in policy order, as entering at `enqueue_time`."""
        seq.enqueue_time = enqueue_time
        self.queued_tokens += admission_tokens(seq)
        self.size += 1
        if self.dynamic:
            self._fresh.append(seq)
            return
        self._entries += 1
        key: tuple = cast(StaticPolicy, self._policy).key(seq.request, enqueue_time)
        if self.ties_by_id:
            key = (*key, seq.request.request_id)
        heapq.heappush(self._heap, (*key, self._entries, seq))

    def push_front(self, seq: Seq) -> None:
        """Put a preempted request ahead of everything queued."""
        self._stack.append(seq)
        self.queued_tokens += admission_tokens(seq)
        self.size += 1

    def push_swapped(self, seq: Seq) -> None:
        """Queue a swapped-out request behind the others swapped out, ahead of the rest."""
        self._swapped.append(seq)
        self.queued_tokens += admission_tokens(seq)
        self.size += 1

    def reorder(self, now: float, view: CacheView | None) -> None:
        """Re-rank the never-started requests with the dynamic policy (at the start of a
        step, before any admission); nothing to do under a static policy."""
        fresh = self._fresh
        if len(fresh) < 2:
            return
        ordered = cast(DynamicPolicy, self._policy).order(list(fresh), now, view)
        if len(ordered) != len(fresh) or {id(s) for s in ordered} != {id(s) for s in fresh}:
            raise ValueError(f"policy {type(self._policy).__name__}: order() returned "
                             f"{len(ordered)} requests for {len(fresh)} waiting; it must "
                             "return the same requests, reordered")
        self._fresh = deque(ordered)

    def _first_rest(self) -> Seq | None:
        if self._heap:
            return self._heap[0][-1]
        return self._fresh[0] if self._fresh else None

    def peek(self) -> Seq | None:
        if self._swapped:
            return self._swapped[0]
        if self._stack:
            return self._stack[-1]
        if self._heap:
            return self._heap[0][-1]
        return self._fresh[0] if self._fresh else None

    def second(self) -> Seq | None:
        """The request right behind the head (for head-of-line diagnosis)."""
        swapped = self._swapped
        if swapped:
            if len(swapped) >= 2:
                return swapped[1]
            if self._stack:
                return self._stack[-1]
            return self._first_rest()
        stack, heap = self._stack, self._heap
        if len(stack) >= 2:
            return stack[-2]
        if stack:
            return self._first_rest()
        if len(heap) >= 3:
            return min(heap[1], heap[2])[-1]
        if len(heap) == 2:
            return heap[1][-1]
        fresh = self._fresh
        return fresh[1] if len(fresh) >= 2 else None

    def pop(self) -> Seq:
        if self._swapped:
            seq = self._swapped.popleft()
        elif self._stack:
            seq = self._stack.pop()
        elif self._heap:
            seq = heapq.heappop(self._heap)[-1]
        else:
            seq = self._fresh.popleft()
        self.queued_tokens -= admission_tokens(seq)
        self.size -= 1
        return seq

    def set_aside(self) -> tuple:
        """Pop the head for this step only; `restore` puts it back in its place."""
        if self._swapped:
            seq = self._swapped.popleft()
            token: tuple = ("swapped", seq, seq)
        elif self._stack:
            seq = self._stack.pop()
            token = ("stack", seq, seq)
        elif self._heap:
            entry = heapq.heappop(self._heap)
            seq = entry[-1]
            token = ("heap", entry, seq)
        else:
            seq = self._fresh.popleft()
            token = ("fresh", seq, seq)
        self.queued_tokens -= admission_tokens(seq)
        self.size -= 1
        return token

    def restore(self, tokens: list[tuple]) -> None:
        """Put heads set aside back where they were (V0's `extendleft` of the leftovers)."""
        for where, item, seq in reversed(tokens):
            if where == "swapped":
                self._swapped.appendleft(item)
            elif where == "stack":
                self._stack.append(item)
            elif where == "fresh":
                self._fresh.appendleft(item)
            else:
                heapq.heappush(self._heap, item)
            self.queued_tokens += admission_tokens(seq)
            self.size += 1

    def first_unswapped(self) -> Seq | None:
        """The head of the queue without the swapped-out requests."""
        if self._stack:
            return self._stack[-1]
        return self._first_rest()

    def sort_unswapped(self, key: Callable[[Seq], Any]) -> None:
        """Sort everything queued but the swapped-out requests by `key` (stable), ahead of
        later arrivals: vLLM V0 sorts its waiting deque so under `policy: priority`."""
        if self.dynamic:
            raise ValueError("sort_unswapped needs a static policy")
        queued = list(reversed(self._stack))
        queued += [entry[-1] for entry in sorted(self._heap, key=lambda e: e[:-1])]
        if len(queued) < 2:
            return
        queued.sort(key=key)
        self._stack = []
        self._heap = []
        for seq in queued:  # keyed below every arrival to come, in sorted order
            self._entries += 1
            self._heap.append((-math.inf, self._entries, seq))
        # (entries increase: the list is already a heap)

    def __iter__(self) -> Iterator[Seq]:
        """Queued requests in service order (for reports; not for the hot path)."""
        yield from self._swapped
        yield from reversed(self._stack)
        for entry in sorted(self._heap, key=lambda e: e[:-1]):
            yield entry[-1]
        yield from self._fresh
