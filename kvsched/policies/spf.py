"""Shortest prompt first: better median and small-request tail, starves long prompts."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.policies.base import SortKey
from kvsched.request import Request


@dataclass(frozen=True, slots=True)
class ShortestPromptFirst:
    """Shortest prompt first; ties by arrival, then input order.

    `aging` (prompt tokens per time unit): a waiting request's effective length is
    `prompt_len - aging * waiting_time`, so a long prompt that has waited long enough
    overtakes fresh short ones.
    """

    aging: float = 0.0

    def __post_init__(self) -> None:
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def key(self, request: Request, enqueue_time: float) -> SortKey:
        return (request.prompt_len + self.aging * enqueue_time, enqueue_time)
