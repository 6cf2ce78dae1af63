"""The waiting queue: preempted requests first (newest victim on top), then the policy's order."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from kvsched.policies.base import Policy
from kvsched.sequence import Seq, SeqState


def admission_tokens(seq: Seq) -> int:
    """Budget tokens its admission takes: its (re)prefill, or 1 to swap in and decode."""
    return 1 if seq.state is SeqState.SWAPPED else seq.prompt_len + seq.generated


class WaitingQueue:
    """Requests waiting to be admitted.

    Preempted requests sit on a stack ahead of everything never started, the most recently
    preempted on top (the lesson: a preempted request goes to the front). The rest form a
    heap ordered by the policy's key, ties broken by entry order. Swapped-out requests may
    instead wait in a first-in-first-out queue ahead of both (vLLM V0's swapped queue).
    """

    __slots__ = ("_policy", "_swapped", "_stack", "_heap", "_entries", "queued_tokens")

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._swapped: deque[Seq] = deque()
        self._stack: list[Seq] = []
        self._heap: list[tuple] = []
        self._entries = 0
        self.queued_tokens = 0  # budget tokens needed to admit everything queued

    def __len__(self) -> int:
        return len(self._swapped) + len(self._stack) + len(self._heap)

    def push(self, seq: Seq, enqueue_time: float) -> None:
        """Queue `seq` in policy order, as entering at `enqueue_time`."""
        self._entries += 1
        key = self._policy.key(seq.request, enqueue_time)
        heapq.heappush(self._heap, (*key, self._entries, seq))
        self.queued_tokens += admission_tokens(seq)

    def push_front(self, seq: Seq) -> None:
        """Put a preempted request ahead of everything queued."""
        self._stack.append(seq)
        self.queued_tokens += admission_tokens(seq)

    def push_swapped(self, seq: Seq) -> None:
        """Queue a swapped-out request behind the others swapped out, ahead of the rest."""
        self._swapped.append(seq)
        self.queued_tokens += admission_tokens(seq)

    def peek(self) -> Seq | None:
        if self._swapped:
            return self._swapped[0]
        if self._stack:
            return self._stack[-1]
        if self._heap:
            return self._heap[0][-1]
        return None

    def second(self) -> Seq | None:
        """The request right behind the head (for head-of-line diagnosis)."""
        swapped = self._swapped
        if swapped:
            if len(swapped) >= 2:
                return swapped[1]
            if self._stack:
                return self._stack[-1]
            return self._heap[0][-1] if self._heap else None
        stack, heap = self._stack, self._heap
        if len(stack) >= 2:
            return stack[-2]
        if stack:
            return heap[0][-1] if heap else None
        if len(heap) >= 3:
            return min(heap[1], heap[2])[-1]
        return heap[1][-1] if len(heap) == 2 else None

    def pop(self) -> Seq:
        if self._swapped:
            seq = self._swapped.popleft()
            self.queued_tokens -= admission_tokens(seq)
            return seq
        seq = self._stack.pop() if self._stack else heapq.heappop(self._heap)[-1]
        self.queued_tokens -= admission_tokens(seq)
        return seq

    def set_aside(self) -> tuple:
        """Pop the head for this step only; `restore` puts it back in its place."""
        if self._swapped:
            seq = self._swapped.popleft()
            token: tuple = ("swapped", seq, seq)
        elif self._stack:
            seq = self._stack.pop()
            token = ("stack", seq, seq)
        else:
            entry = heapq.heappop(self._heap)
            seq = entry[-1]
            token = ("heap", entry, seq)
        self.queued_tokens -= admission_tokens(seq)
        return token

    def restore(self, tokens: list[tuple]) -> None:
        """Put heads set aside back where they were (V0's `extendleft` of the leftovers)."""
        for where, item, seq in reversed(tokens):
            if where == "swapped":
                self._swapped.appendleft(item)
            elif where == "stack":
                self._stack.append(item)
            else:
                heapq.heappush(self._heap, item)
            self.queued_tokens += admission_tokens(seq)

    def __iter__(self) -> Iterator[Seq]:
        """Queued requests in service order (for reports; not for the hot path)."""
        yield from self._swapped
        yield from reversed(self._stack)
        for entry in sorted(self._heap, key=lambda e: e[:-1]):
            yield entry[-1]
