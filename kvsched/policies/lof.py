"""Longest output first (SGLang's `lof`): the requests that will decode longest start first."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.policies.base import SortKey
from kvsched.request import Request


@dataclass(frozen=True, slots=True)
class LongestOutputFirst:
    """Largest `output_len` (SGLang's `max_new_tokens`) first; ties by arrival, then input
    order (SGLang 0.5.23 `schedule_policy.py`: sorted by `-max_new_tokens`).

    `aging` (output tokens per time unit): a waiting request's effective length grows by
    `aging * waiting_time`, so short outputs are eventually served.
    """

    aging: float = 0.0

    def __post_init__(self) -> None:
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def key(self, request: Request, enqueue_time: float) -> SortKey:
        return (-request.output_len + self.aging * enqueue_time, enqueue_time)
