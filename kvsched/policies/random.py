"""SGLang's `random` policy: the waiting queue in a seeded, reproducible random order."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from kvsched.policies.base import SortKey
from kvsched.request import Request


@dataclass(frozen=True, slots=True)
class Random:
    """A random order, the same for the same `seed` (SGLang 0.5.23 `schedule_policy.py`
    shuffles `waiting_queue` before each prefill round).

    Each request draws its place when it enters the queue (a hash of `seed`, its id and
    the entry time, so a re-queued request draws again); SGLang reshuffles every waiting
    request each round instead, so here a request that lost a draw keeps its place among
    those already waiting. `aging` (time units per unit of place) moves earlier entries
    ahead: 0 is pure chance.
    """

    seed: int = 0
    aging: float = 0.0

    def __post_init__(self) -> None:
        # (the seed is hashed as text: 1.5 and 1 would silently be other orders than asked)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if not self.aging >= 0:
            raise ValueError(f"aging must be >= 0, got {self.aging}")

    def key(self, request: Request, enqueue_time: float) -> SortKey:
        digest = hashlib.blake2b(f"{self.seed}\0{request.request_id}\0{enqueue_time!r}"
                                 .encode(), digest_size=8).digest()
        draw = struct.unpack(">Q", digest)[0] / 2.0**64  # uniform in [0, 1)
        return (draw + self.aging * enqueue_time, enqueue_time)
