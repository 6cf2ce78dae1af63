"""A request as a workload describes it, and the statuses a run can leave it in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kvsched.prefix import Prefix

MAX_LEN = 2 ** 40
"""The longest prompt or output (the compiled modules count tokens in 64-bit integers)."""

MAX_TIME = 2.0 ** 50
"""The latest arrival time (on the step clock a step number, which the compiled modules
hold in 64 bits, and which must stay a whole float after as many steps again)."""


class Status(StrEnum):
    """How a request ended a run."""

    FINISHED = "finished"  # produced all `output_len` tokens
    STARVED = "starved"  # still waiting when no work and no arrival was left
    UNFINISHED = "unfinished"  # still queued or running when `max_steps` stopped the run
    REJECTED = "rejected"  # turned away at arrival (a guard or admission control)


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload.

    `arrival_time` is in the run's time unit: steps on the step clock, seconds under a time
    model. `priority`: lower values are served first by the `priority` policy.
    `class_name` is a free label (e.g. "short", "long") carried into the records so that
    metrics can be split per class. `session` groups a conversation's turns (the `session`
    router keeps them on one replica); None when the workload gives none.

    `prefix` names the request's tokens as segments (`kvsched.prefix`), so that a prefix
    cache can recognise what two requests share: it covers the first tokens of the prompt
    (the rest is the request's own), or the whole prompt and the answer (a conversation's
    next turn repeats them). `after` holds a conversation's next turn back until the request
    with that id has ended; it then arrives `think_time` later (`arrival_time` is ignored).
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    priority: int = 0
    class_name: str | None = None
    session: str | None = None
    prefix: Prefix | None = None
    after: str | None = None
    think_time: float = 0.0

    def __post_init__(self) -> None:
        if (0 < self.prompt_len <= MAX_LEN and 0 < self.output_len <= MAX_LEN
                and 0 <= self.arrival_time <= MAX_TIME and self.prefix is None
                and self.think_time == 0.0):
            return  # the common request, checked in one test (a trace makes millions)
        if self.prompt_len < 1:
            raise ValueError(f"request {self.request_id}: prompt_len must be >= 1")
        if self.output_len < 1:
            raise ValueError(f"request {self.request_id}: output_len must be >= 1")
        if self.prompt_len > MAX_LEN or self.output_len > MAX_LEN:
            raise ValueError(f"request {self.request_id}: prompt_len and output_len must be "
                             f"<= {MAX_LEN:,} (2**40)")
        if not 0 <= self.arrival_time <= MAX_TIME:  # also refuses NaN
            raise ValueError(f"request {self.request_id}: arrival_time must be >= 0 and "
                             f"<= 2**50, got {self.arrival_time}")
        if self.prefix is not None:
            covered = self.prefix.num_tokens
            if covered > self.prompt_len and covered != self.prompt_len + self.output_len:
                raise ValueError(f"request {self.request_id}: its prefix covers {covered} "
                                 f"tokens, more than its prompt ({self.prompt_len})")
        if not 0 <= self.think_time <= MAX_TIME:
            raise ValueError(f"request {self.request_id}: think_time must be >= 0 and "
                             f"<= 2**50, got {self.think_time}")
