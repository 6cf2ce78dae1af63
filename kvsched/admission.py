"""SLO-aware admission (the lesson's exercise 2): `SloAdmission` uses a TTFT target to turn
requests away at arrival when the work queued ahead of them says they would miss it:
rejecting early is usually better service than accepting and timing out.

The targets a run is measured against (goodput) are `kvsched.records.slo.Slo`, read by the
summary and the diagnosis; it is importable from here too, where it was first written.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from kvsched.kinds import Reason, Why
from kvsched.records.slo import Slo as Slo  # (importable from here too)
from kvsched.timing import TimeModel

if TYPE_CHECKING:  # (the engine's modules: a compiled run imports none of them)
    from kvsched.engine.view import EngineView
    from kvsched.sequence import Seq


class Estimator(StrEnum):
    """How admission predicts a new request's TTFT."""

    TOKENS = "tokens"  # prefill tokens queued ahead / budget left after the decodes
    THROUGHPUT = "throughput"  # requests queued ahead / recent admission rate


@dataclass(frozen=True, slots=True)
class SloAdmission:
    """Reject at arrival when the estimated TTFT exceeds `ttft_slo` (in the run's time unit).

    `tokens`: the queued prefill work (waiting prompts, plus prompt + generated tokens of
    preempted requests) and this prompt, served at `budget - running decodes` tokens per step,
    each step priced by the time model. It counts all queued work, which is exact under FCFS
    and pessimistic under policies that let the newcomer jump ahead. It ignores memory.
    `throughput`: requests ahead + 1 divided by the admission rate of the last `window` steps
    (it sees memory and head-of-line limits as they are); `tokens` until the first window has
    filled or admitted something; a full window with no admission counts as one.
    """

    ttft_slo: float
    estimator: Estimator = Estimator.TOKENS
    window: int = 200

    def __post_init__(self) -> None:
        if not self.ttft_slo > 0:
            raise ValueError(f"ttft_slo must be > 0, got {self.ttft_slo}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        object.__setattr__(self, "estimator", Estimator(self.estimator))


class AdmissionController:
    """Applies an `SloAdmission` during one run; keeps the recent admission rate."""

    def __init__(self, policy: SloAdmission, clock: TimeModel, budget: int) -> None:
        self.policy = policy
        self.clock = clock
        self.budget = budget  # the engine's max_num_batched_tokens
        self._admitted: deque[tuple[float, float, int]] = deque()  # (start, end, admitted)
        self._admitted_sum = 0

    def observe(self, start: float, end: float, admitted: int) -> None:
        """Called after each step with how many requests it admitted."""
        window = self._admitted
        window.append((start, end, admitted))
        self._admitted_sum += admitted
        if len(window) > self.policy.window:
            self._admitted_sum -= window.popleft()[2]

    def observe_quiet(self, starts: list[float], durations: list[float]) -> None:
        """Steps of a decode stretch, none of which admitted anything."""
        keep = self.policy.window
        window = self._admitted
        for start, duration in zip(starts[-keep:], durations[-keep:], strict=True):
            window.append((start, start + duration, 0))
            if len(window) > keep:
                self._admitted_sum -= window.popleft()[2]

    def estimate(self, seq: Seq, engine: EngineView, now: float) -> float:
        """Predicted TTFT of `seq` if queued now (arrival at `seq.request.arrival_time`)."""
        wait = now - seq.request.arrival_time  # the step clock rounds arrivals up
        window = self._admitted
        if self.policy.estimator is Estimator.THROUGHPUT and window and (
                self._admitted_sum or len(window) >= self.policy.window):
            # A full window that admitted nothing: the queue is stalled; assume one admission
            # per window at best rather than the tokens estimate's optimism.
            span = window[-1][1] - window[0][0]
            return wait + (engine.num_waiting + 1) * span / max(1, self._admitted_sum)
        running = engine.num_decoding
        per_step = max(1, self.budget - running)
        work = engine.queued_tokens + seq.prompt_len
        steps = math.ceil(work / per_step)
        duration = self.clock.duration(min(work, per_step), running, engine.kv_tokens, 0)
        return wait + steps * duration

    def rejects(self, seq: Seq, engine: EngineView, now: float) -> Reason | None:
        """Why `seq` is turned away, or None to admit it to the queue."""
        estimate = self.estimate(seq, engine, now)
        if estimate <= self.policy.ttft_slo:
            return None
        return Reason(f"estimated TTFT {estimate:.4g} > ttft_slo {self.policy.ttft_slo:g} "
                      f"({self.policy.estimator.value} estimator)", Why.TTFT_OVER_TARGET)
