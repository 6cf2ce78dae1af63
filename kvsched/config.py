"""The engine's knobs: budgets, KV pool, and the rules where real schedulers differ.

Each rule is one orthogonal switch, so that vLLM V0, vLLM V1 and SGLang are combinations of
them (see the table in README.md, section "The engine").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

from kvsched.compat import Kind, first_conflict

MAX_COUNT = 2 ** 40
"""The largest pool, block, budget or sequence count (and request length, `kvsched.request`):
the compiled modules count in 64-bit integers, with room for their sums."""

MAX_STEPS = 2 ** 62
"""The largest `max_steps` (step numbers are 64-bit integers in the compiled build)."""


def one_of(choices: Iterable[str]) -> Any:
    """The `Literal` of a scenario field that takes one of `choices` (an enum's values, a
    registry's names), so that the schema repeats no enum or registry."""
    return Literal[tuple(str(choice) for choice in choices)]


PREFIX_CACHES = ("hashed", "radix")
"""The prefix caches an engine can run (`engine.prefix_cache`; `kvsched.kvcache.tracker.CACHES`
builds each, and tests/test_layout.py holds the two equal)."""


class PreemptionMode(StrEnum):
    """What happens to a victim's KV cache."""

    RECOMPUTE = "recompute"  # drop it; re-prefill prompt + generated tokens later (vLLM default)
    SWAP = "swap"  # copy the blocks to host memory and back


class Victim(StrEnum):
    """Which running request loses its KV cache when a decode needs a block and none is free."""

    LAST_ADMITTED = "last_admitted"  # tail of the running queue (vLLM V0, V1 under FCFS)
    LOWEST_PRIORITY = "lowest_priority"  # max (priority, arrival) (vLLM V1 under priority)
    FEWEST_GENERATED = "fewest_generated"  # fewest output tokens, longest prompt (SGLang)
    BY_POLICY = "by_policy"  # vLLM V1: lowest_priority under `priority`, else last_admitted
    # vLLM V0 chunked: the tail of its running queue, where prefills under way sit behind
    # the decodes: the last prefill under way, else the decode that joined the queue last
    # (a request joins it when its prefill completes)
    QUEUE_TAIL = "queue_tail"


class Requeue(StrEnum):
    """Where a preempted request re-enters the waiting queue."""

    FRONT = "front"  # ahead of everything never started, newest victim first (vLLM)
    BACK = "back"  # re-ordered by the policy as if it had just arrived (SGLang)
    BY_POLICY = "by_policy"  # vLLM V1: front under fcfs, else the policy's order by arrival


class StepOrder(StrEnum):
    """How one step is assembled from running decodes, unfinished chunks and admissions."""

    DECODE_FIRST = "decode_first"  # decodes, then chunks under way, then admissions (lesson)
    PREFILL_FIRST = "prefill_first"  # a step that prefills runs no decode (vLLM V0, SGLang)
    # vLLM V1: one loop over the running requests in admission order (decodes and chunks
    # alike, blocks taken per chunk, preempting from the victim rule when a request's
    # tokens do not fit), then admissions; see conformance/RULES.md R3-R8.
    RUNNING_LOOP = "running_loop"


class AdmissionRule(StrEnum):
    """What an admission must find free in the KV pool."""

    BLOCKS = "blocks"  # the blocks of its prompt, above the watermark (vLLM, the lesson)
    # SGLang's PrefillAdder: also the decode tokens the running requests are expected to
    # write (new_token_ratio), with the batch-full latch (see kvsched.reservation)
    FUTURE_TOKENS = "future_tokens"


class RejectionTexts(StrEnum):
    """Whose words give the reason of a request turned away at arrival."""

    KVSCHED = "kvsched"  # kvsched's own (and vLLM V1's for max_model_len)
    VLLM_V0 = "vllm_v0"  # vLLM 0.8.5's scheduler warnings (a prompt equal to max_model_len runs)


class Unschedulable(StrEnum):
    """What to do with a request that can never run (prompt over the budget, or over the pool)."""

    STARVE = "starve"  # keep it queued, as the lesson does: it starves (and may block others)
    REJECT = "reject"  # turn it away at arrival with the reason, as vLLM does


class PrefixAccounting(StrEnum):
    """What a prefix-cache hit changes at admission (both compute only the uncached tokens)."""

    V1 = "v1"  # cached tokens are not scheduled; fresh blocks + idle hit blocks must be free
    V0 = "v0"  # cached tokens are free for the budget (charged >= 1 token), every prompt
    #            block is counted against the free ones, partial chunks round down to blocks


def effective_step_order(step_order: str, mix_prefill_decode: bool) -> StepOrder:
    """The step order an engine runs: `mix_prefill_decode: false` is the older spelling of
    `prefill_first` (it changes only `decode_first`)."""
    order = StepOrder(step_order)
    if order is StepOrder.DECODE_FIRST and not mix_prefill_decode:
        return StepOrder.PREFILL_FIRST
    return order


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Limits and rules of one simulated engine. Defaults are the lesson's demo engine.

    - `max_num_batched_tokens`: token budget of one step (prefill + decode tokens).
    - `max_num_seqs`: most requests running at once.
    - `block_size`, `num_blocks`: the KV pool, in blocks of `block_size` tokens.
    - `watermark`: fraction of the pool that admissions must leave free
      (`floor(watermark * num_blocks)` blocks); decode growth ignores it.
    - `max_steps`: safety stop; requests left then are `unfinished`.
    - `victim`, `requeue`, `mix_prefill_decode`, `admit_after_preempt`: the rules that tell
      vLLM V0, vLLM V1 and SGLang apart (see each enum).
    - `mix_prefill_decode`: prefills and decodes share a step (the lesson, vLLM V1). When
      false a step that admits a prefill runs no decode (vLLM V0 default, SGLang).
    - `admit_after_preempt`: a step that preempted may still admit (the lesson, vLLM V0);
      vLLM V1 skips admissions in such a step.
    - `chunked_prefill`: split prompts into chunks that fit the budget left after decodes;
      `long_prefill_token_threshold` (0 = off) caps one request's chunk per step.
    - `on_unschedulable`: starve (the lesson) or reject at arrival.
    - `step_order`: see `StepOrder`; `mix_prefill_decode: false` is the older spelling of
      `prefill_first`.
    - `max_model_len` (None = no limit): a prompt of `max_model_len` tokens or more is
      rejected at arrival with vLLM's message; outputs stop at `max_model_len` tokens.
    - `null_block`: one block of `num_blocks` is never usable (vLLM V1's null block, so
      `num_blocks` is what vLLM logs); the watermark still counts from `num_blocks`.
    - `scheduler_reserve_full_isl`: under `running_loop`, admit only if the whole prompt
      (plus outputs, when resumed) would fit the free blocks now (vLLM's flag, on there).
    - `preemption_warning`: log vLLM V0's preemption warning as a `warning` event on the
      1st, 51st, 101st ... preemption (`num_cumulative_preemption % 50 == 0`).
    - `delay_factor` (vLLM V0, 0 = off): a step admits prompts only once the oldest waiting
      request has waited more than `delay_factor` x the latency of the last step that ran
      prompts, or when nothing runs.
    - `swapped_fifo`: swapped-out requests wait in their own first-in-first-out queue ahead
      of the waiting queue (vLLM V0); false: on the preempted stack, newest first.
    - `max_queued_requests` (None = no limit): an arrival that finds this many requests
      waiting is rejected with SGLang's message (preempted requests waiting count too).
    - `enable_prefix_caching`: blocks have identity (`kvsched.kvcache`): a request finds the
      full blocks of its prefix that earlier requests computed, and its own on resume.
      `prefix_accounting` says what a hit changes at admission (`PrefixAccounting`);
      `prefix_cache` which cache: `hashed` (vLLM's blocks) or `radix` (SGLang's tree).
    - `admission_rule`: see `AdmissionRule`. Under `future_tokens`, `max_prefill_tokens`
      caps the prompt tokens one prefill step takes (SGLang's flag; the first request of a
      step may exceed it when chunking is off) and `schedule_conservativeness` scales
      SGLang's initial `new_token_ratio` (0.7 x it, at most 1).
    - `rejection_texts`: see `RejectionTexts`.
    - `max_num_partial_prefills` / `max_long_partial_prefills` (vLLM V0's chunked mode, 1 =
      off): at most that many prefills under way, of which that many long ones (over
      `long_prefill_token_threshold`, which then only classifies: default 4% of
      `max_model_len`); see `kvsched.partial_prefills`.
    - `append_free_block` (vLLM V0's `can_append_slots`): a running request decodes only
      while at least one block is free, even when its last block has room (V0 counts every
      block an append touches as a new one); otherwise the tail is preempted first.
    - `priority_preemption` (vLLM V0's `_schedule_priority_preemption`, with `policy:
      priority`): the waiting queue keeps arrival order (recompute victims at its front)
      and is sorted by (priority, arrival) only in a step that admits no prefill, after
      the running requests are sorted so and worse ones are preempted from the tail until
      the head fits.
    - `priority_orders_queue`: false: the queue policy orders nothing, requests wait in
      arrival order (vLLM V0's chunked scheduler never sorts by priority).
    - `swap_in_front`, `prefill_past_swapped`, `swap_in_after_preempt` (vLLM V0's chunked
      scheduler): a request swapped in joins the front of the running queue (so it is the
      last victim); prefills are admitted while requests wait swapped out (after the
      step's swap-ins); no swap-in in a step that preempted (when false).
    - `swap_prefills` (vLLM V0): with `preemption: swap` a request preempted mid-prefill
      is swapped out too, its chunks kept; it is swapped back in only when the rest of its
      prompt fits the step's budget (V0 does not chunk a swap-in), and completes it then.
    - `readmit_victims`: a request preempted in a step may be admitted again in that step
      (the lesson); false: it re-enters the queue after the step's admissions (vLLM V0's
      chunked scheduler extends `waiting` with its victims after `_schedule_prefills`).
    - `async_scheduling` (vLLM V1's flag, under `running_loop`): vLLM's `AsyncScheduler` as
      the engine core's batch queue runs it: each step is decided while the one before it
      runs, so the requests that step finishes still hold their blocks and places in that
      decision, and a request arriving while a step runs waits for the decision after
      (conformance/RULES.md A1-A6).
    - `enable_priority_scheduling` (SGLang's flag, under `future_tokens`): a request that
      finds the batch full preempts running requests whose `priority` is worse (larger) by
      more than `priority_scheduling_preemption_threshold`; the queue order is `policy`.
    """

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 180
    watermark: float = 0.01
    preemption: PreemptionMode = PreemptionMode.RECOMPUTE
    max_steps: int = 5_000_000
    victim: Victim = Victim.LAST_ADMITTED
    requeue: Requeue = Requeue.FRONT
    mix_prefill_decode: bool = True
    admit_after_preempt: bool = True
    chunked_prefill: bool = False
    long_prefill_token_threshold: int = 0
    on_unschedulable: Unschedulable = Unschedulable.STARVE
    step_order: StepOrder = StepOrder.DECODE_FIRST
    max_model_len: int | None = None
    null_block: bool = False
    scheduler_reserve_full_isl: bool = True
    preemption_warning: bool = False
    swapped_fifo: bool = False
    delay_factor: float = 0.0
    max_queued_requests: int | None = None
    enable_prefix_caching: bool = False
    prefix_accounting: PrefixAccounting = PrefixAccounting.V1
    prefix_cache: str = PREFIX_CACHES[0]
    admission_rule: AdmissionRule = AdmissionRule.BLOCKS
    max_prefill_tokens: int = 16384
    schedule_conservativeness: float = 1.0
    rejection_texts: RejectionTexts = RejectionTexts.KVSCHED
    max_num_partial_prefills: int = 1
    max_long_partial_prefills: int = 1
    enable_priority_scheduling: bool = False
    priority_scheduling_preemption_threshold: int = 10
    append_free_block: bool = False
    priority_preemption: bool = False
    priority_orders_queue: bool = True
    swap_in_front: bool = False
    prefill_past_swapped: bool = False
    swap_in_after_preempt: bool = True
    readmit_victims: bool = True
    swap_prefills: bool = False
    async_scheduling: bool = False
    # A host-memory tier under the prefix cache (`kvsched.kvcache.offload`): evicted cached
    # blocks kept there (0: none), loaded back at `kv_offload_gbps` (gigabits per second),
    # a block being `kv_offload_block_bytes` (None: the time model's, a roofline's).
    kv_offload_blocks: int = 0
    kv_offload_gbps: float = 0.0
    kv_offload_block_bytes: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks",
                     "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps > MAX_STEPS:
            raise ValueError(f"max_steps must be <= {MAX_STEPS:,} (2**62), got "
                             f"{self.max_steps:,}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks"):
            if getattr(self, name) > MAX_COUNT:
                raise ValueError(f"{name} must be <= {MAX_COUNT:,} (2**40), got "
                                 f"{getattr(self, name):,}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark}")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if not self.delay_factor >= 0:
            raise ValueError(f"delay_factor must be >= 0, got {self.delay_factor}")
        if self.max_queued_requests is not None and self.max_queued_requests < 1:
            raise ValueError(f"max_queued_requests must be >= 1, got {self.max_queued_requests}")
        if self.max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}")
        if not self.schedule_conservativeness > 0:
            raise ValueError("schedule_conservativeness must be > 0, got "
                             f"{self.schedule_conservativeness}")
        if self.kv_offload_blocks < 0 or self.kv_offload_gbps < 0:
            raise ValueError("kv_offload_blocks and kv_offload_gbps must be >= 0")
        if self.kv_offload_blocks and not (self.enable_prefix_caching
                                           and self.kv_offload_gbps > 0):
            raise ValueError("a host tier (kv_offload_blocks) needs enable_prefix_caching and "
                             "kv_offload_gbps > 0")
        if self.max_num_partial_prefills < 1 or self.max_long_partial_prefills < 1:
            raise ValueError("max_num_partial_prefills and max_long_partial_prefills must be "
                             ">= 1")
        # Accept the enums' string values from library callers too.
        object.__setattr__(self, "preemption", PreemptionMode(self.preemption))
        object.__setattr__(self, "victim", Victim(self.victim))
        object.__setattr__(self, "requeue", Requeue(self.requeue))
        object.__setattr__(self, "on_unschedulable", Unschedulable(self.on_unschedulable))
        object.__setattr__(self, "prefix_accounting", PrefixAccounting(self.prefix_accounting))
        if self.prefix_cache not in PREFIX_CACHES:
            raise ValueError(f"prefix_cache must be {' or '.join(PREFIX_CACHES)}, got "
                             f"{self.prefix_cache!r}")
        object.__setattr__(self, "admission_rule", AdmissionRule(self.admission_rule))
        object.__setattr__(self, "rejection_texts", RejectionTexts(self.rejection_texts))
        order = effective_step_order(self.step_order, self.mix_prefill_decode)
        object.__setattr__(self, "step_order", order)
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        conflict = first_conflict(values, kinds=(Kind.UNRUNNABLE,))
        if conflict is not None:
            raise ValueError(f"{conflict.key}: {conflict.message}")
        object.__setattr__(self, "mix_prefill_decode", order is not StepOrder.PREFILL_FIRST)

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can hold: `num_blocks`, less vLLM V1's null block."""
        return self.num_blocks - 1 if self.null_block else self.num_blocks

    @property
    def watermark_blocks(self) -> int:
        """Blocks an admission must leave free: floor(watermark * num_blocks), as vLLM V0."""
        # round() first so that 0.29 * 100 gives 29, not 28.999999999999996 -> 28.
        return math.floor(round(self.watermark * self.num_blocks, 9))


ENGINE_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {name: field.default for name, field in EngineConfig.__dataclass_fields__.items()})
"""Each engine key's default, for `kvsched.compat.first_conflict`'s rows that compare a key
with its own (`DEFAULT`)."""
