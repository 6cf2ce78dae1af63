"""What a run records: one row per request, per step, per event, and optionally per batch entry.

Column names here are a contract (CSV files, the CLI, users' notebooks). Times are in the
run's time unit (`RunResult.time_unit`: "steps" or "s"); `*_steps` columns are always steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kvsched.config import EngineConfig

REQUEST_COLUMNS = (
    "request_id", "arrival_time", "prompt_len", "output_len", "priority", "class", "status",
    "first_scheduled_time", "first_token_time", "finish_time", "ttft", "ttft_steps",
    "e2e_latency", "queue_time", "num_preemptions", "num_recomputed_tokens",
    "num_swapped_blocks", "max_token_gap", "generated_tokens", "reason", "tpot",
    "prefix_hit_tokens", "cached_tokens",
)
"""Per request. `ttft` = first token time - arrival (a request admitted on its arrival step
has ttft 1 on the step clock); `ttft_steps` = steps from the one it joined the queue in to
the one that produced its first token, inclusive; `queue_time` = first scheduled - arrival;
`num_recomputed_tokens` = tokens prefilled again after recompute preemptions;
`num_swapped_blocks` = blocks moved to host and back (both directions);
`max_token_gap` = longest time between two of its consecutive tokens; `reason` = why it
starved or was rejected; `tpot` = time per output token after the first, as vLLM's
benchmark defines it: (e2e_latency - ttft) / (output_len - 1), for finished requests of
at least two tokens (None otherwise); `prefix_hit_tokens` = prompt tokens found in the
prefix cache at its first admission (0 without prefix caching; empty if never admitted),
`cached_tokens` = tokens found cached over all its admissions, resumes included."""

STEP_COLUMNS = (
    "step", "time", "duration", "num_running", "num_waiting", "num_prefill_requests",
    "prefill_tokens", "decode_tokens", "recomputed_tokens", "budget_used", "blocks_used",
    "blocks_free", "num_preempted", "num_admitted", "num_finished", "swapped_out_blocks",
    "swapped_in_blocks", "thrash_ratio", "backpressure", "mfu", "mbu",
    "cached_blocks", "evicted_blocks",
)
"""Per executed step. `time` = its start; queue lengths and blocks are as the batch runs
(after admissions and preemptions, before finishes); `prefill_tokens` are first-time prefill
tokens, `recomputed_tokens` prefill tokens recomputed after preemption, `decode_tokens` one
per decoding request (swap-ins included); `budget_used` is their sum; `thrash_ratio` is
(recomputed + swapped) / newly generated tokens over the backpressure window ending at this
step (swapped: tokens of KV moved to host and back), and
`backpressure` 1 while that signal is up. With a hardware time model (roofline), `mfu` and
`mbu` are the step's model-FLOPs and memory-bandwidth utilisation of one GPU (useful FLOPs,
and weight + KV bytes, over the step's duration x the datasheet peaks); empty otherwise.
With prefix caching on, `cached_blocks` counts the blocks holding a cached prefix after the
step (in use or free) and `evicted_blocks` the cached blocks the step evicted for new ones
(both 0 otherwise)."""

class StepOutcome(NamedTuple):
    """One executed step, as its `STEP_COLUMNS` row (same names, same order): frozen, read
    by name, and a tuple where the writers take rows."""

    step: int
    time: float
    duration: float
    num_running: int
    num_waiting: int
    num_prefill_requests: int
    prefill_tokens: int
    decode_tokens: int
    recomputed_tokens: int
    budget_used: int
    blocks_used: int
    blocks_free: int
    num_preempted: int
    num_admitted: int
    num_finished: int
    swapped_out_blocks: int
    swapped_in_blocks: int
    thrash_ratio: float
    backpressure: int
    mfu: float | None
    mbu: float | None
    cached_blocks: int
    evicted_blocks: int

    @property
    def end(self) -> float:
        return self.time + self.duration


EVENT_COLUMNS = ("step", "time", "request_id", "event", "detail")
"""arrive, admit, preempt, swap_out, swap_in, finish, starve, reject, and backpressure
(on/off, no request). `time`: the arrival time for arrive/reject, the step's start for
admit/preempt/swap/backpressure, its end for finish."""

BATCH_COLUMNS = ("step", "time", "request_id", "phase", "num_tokens")
"""Optional: what each step ran, one row per scheduled request; phase prefill (recompute
included), decode or swap_in."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    priority: int
    class_name: str | None
    status: str
    first_scheduled_time: float | None
    first_token_time: float | None
    finish_time: float | None
    ttft: float | None
    ttft_steps: int | None
    e2e_latency: float | None
    queue_time: float | None
    num_preemptions: int
    num_recomputed_tokens: int
    num_swapped_blocks: int
    max_token_gap: float | None
    generated_tokens: int
    reason: str | None
    tpot: float | None = None
    prefix_hit_tokens: int | None = None
    cached_tokens: int = 0

    def as_row(self) -> tuple:
        return (self.request_id, self.arrival_time, self.prompt_len, self.output_len,
                self.priority, self.class_name, self.status, self.first_scheduled_time,
                self.first_token_time, self.finish_time, self.ttft, self.ttft_steps,
                self.e2e_latency, self.queue_time, self.num_preemptions,
                self.num_recomputed_tokens, self.num_swapped_blocks, self.max_token_gap,
                self.generated_tokens, self.reason, self.tpot, self.prefix_hit_tokens,
                self.cached_tokens)


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything one simulation recorded. Rows of `steps`, `events`, `batches` follow
    STEP_COLUMNS, EVENT_COLUMNS, BATCH_COLUMNS; `batches` is None unless requested.
    `step_log` holds the step records as made (rows and decode stretches); `steps`
    expands them, one row per step, when the run kept them."""

    config: EngineConfig
    time_unit: str
    requests: Sequence[RequestRecord]  # a RecordTable from `simulate`
    step_log: Any
    events: list[tuple]
    batches: list[tuple] | None
    summary: dict[str, Any]

    @property
    def steps(self) -> list[tuple]:
        return self.step_log.rows()
