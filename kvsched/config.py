"""The engine's knobs: budgets, KV pool, and the rules where real schedulers differ.

Each rule is one orthogonal switch, so that vLLM V0, vLLM V1 and SGLang are combinations of
them (`kvsched.presets`; every knob's meaning: `kvsched keys`, or the key table in
docs/scenarios.md, both made from the declarations here).

Annotations are objects, not strings (no `from __future__ import annotations`): `KNOB_TYPES`
reads them at import, and each string would be compiled then, on every run.
"""

import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, get_args, get_type_hints

from kvsched.compat import Kind, first_conflict

MAX_COUNT = 1_000_000_000
"""The largest pool, block, budget, sequence or step count a scenario or the engine takes
(the compiled modules count in 64-bit integers: with room for their sums; a request's
lengths have their own bound, `kvsched.request.MAX_LEN`)."""

MAX_FLOAT = 1e12
"""The largest factor or time a knob takes (so extreme values are refused, with the bound in
the message, instead of overflowing)."""


PREFIX_CACHES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "hashed": ("kvsched.kvcache.hashed:HashedBlockCache",
               "vLLM's hashed full blocks, free queue of uncached then least recently freed "
               "cached blocks"),
    "radix": ("kvsched.kvcache.radix:RadixCache",
              "SGLang's radix tree: duplicates computed twice go back to the pool, least "
              "recently used unlocked leaves evicted first; pages are blocks of `block_size`"),
})
"""The prefix caches an engine can run (`engine.prefix_cache`), the registry: each kind's
class (a `kvsched.kvcache.base.KVCache`, loaded when a run uses it) and one line for the
knob's meaning. A new kind is its module in kvsched/kvcache/ and its line here."""


def one_of(choices: Iterable[str]) -> Any:
    """The `Literal` of a scenario field that takes one of `choices` (an enum's values, a
    registry's names), so that the schema repeats no enum or registry."""
    return Literal[tuple(str(choice) for choice in choices)]


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


class Range(NamedTuple):
    """The numbers a knob takes, as pydantic's `Field` constraints spell them: the engine checks
    them (`EngineConfig`) and the scenario's schema is made from them (`kvsched.schema`), so a
    bound is written once."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def problem(self, value: float) -> str | None:
        """What is wrong with `value` ("must be >= 1"), or None."""
        for op, holds, bound in ((">=", operator.ge, self.ge), (">", operator.gt, self.gt),
                                 ("<=", operator.le, self.le), ("<", operator.lt, self.lt)):
            if bound is not None and not holds(value, bound):  # NaN holds none
                return f"must be {op} {shown(bound)}"
        return None


def shown(value: Any) -> str:
    """A number as a bound or an error shows it: `1,000,000,000`, `0.01` (a whole float as an
    integer), anything else as `repr`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 63:
        value = int(value)
    try:
        return f"{value:,}"
    except (TypeError, ValueError):
        return repr(value)


COUNT = Range(ge=1, le=MAX_COUNT)
"""A pool, budget, sequence or step count."""
NON_NEGATIVE_COUNT = Range(ge=0, le=MAX_COUNT)
POSITIVE = Range(gt=0, le=MAX_FLOAT)
NON_NEGATIVE = Range(ge=0, le=MAX_FLOAT)
FRACTION = Range(ge=0, lt=1)


def knob(default: Any, doc: str, values: Range | None = None, *,
         choices: Iterable[str] = (), scenario: bool = True, also: str = "") -> Any:
    """One engine knob, declared once: its default, the numbers or `choices` it takes (an enum
    knob's are its enum's values) and what it means (markdown: the docs' key table, `kvsched
    keys`). `scenario: False`: set by the engine from another key, never written in a file;
    `also`: a word a scenario may write instead, which the loader resolves (`auto`)."""
    return field(default=default, metadata=MappingProxyType(
        {"doc": doc, "range": values, "choices": tuple(choices), "scenario": scenario,
         "also": also}))


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Limits and rules of one simulated engine; the defaults are the lesson's demo engine.

    Each rule is one orthogonal switch, so that vLLM V0, vLLM V1 and SGLang are combinations
    of them (`kvsched.presets`). Every knob is declared once, here (`knob`): the scenario's
    `engine:` keys (`kvsched.schema.EngineSpec`), their bounds, `kvsched keys` and the key
    table in docs/scenarios.md are made from these declarations.
    """

    max_num_batched_tokens: int = knob(
        2048, "token budget of one step: prefill + recompute + decode tokens", COUNT)
    max_num_seqs: int = knob(
        256, "most requests running (decoding or mid-prefill) at once", COUNT)
    block_size: int = knob(16, "tokens per KV block", COUNT)
    num_blocks: int = knob(
        180, "KV pool size; `auto` with a roofline time: what the GPUs hold (see `time`)", COUNT,
        also="auto")
    watermark: float = knob(
        0.01, "admissions leave `floor(watermark * num_blocks)` blocks free; decode growth "
        "ignores it", FRACTION)
    preemption: PreemptionMode = knob(
        PreemptionMode.RECOMPUTE, "`recompute` (drop the KV, re-prefill prompt + generated "
        "later) or `swap` (copy blocks to host and back)")
    max_steps: int = knob(
        5_000_000, "safety stop on executed steps; requests left are `unfinished`", COUNT)
    victim: Victim = knob(
        Victim.LAST_ADMITTED, "who is preempted: `last_admitted`, `lowest_priority` (max "
        "priority value, then latest arrival, then the earliest admitted: vLLM V1's `max` over "
        "its running list), `fewest_generated` (then longest prompt), `by_policy` (vLLM V1), "
        "`queue_tail` (vLLM V0 chunked: the last prefill under way, else the request whose "
        "prefill completed last)")
    requeue: Requeue = knob(
        Requeue.FRONT, "where a preempted request re-enters: `front` (ahead of everything "
        "never started, newest victim first) or `back` (ordered by the policy as a new "
        "arrival)")
    mix_prefill_decode: bool = knob(
        True, "prefills and decodes share a step; `false`: a step that prefills runs no decode")
    admit_after_preempt: bool = knob(
        True, "a step that preempted may still admit waiting requests")
    chunked_prefill: bool = knob(
        False, "split prompts into chunks that fit the budget left after the decodes")
    long_prefill_token_threshold: int = knob(
        0, "with chunking, cap one request's chunk per step (0: no cap)", NON_NEGATIVE_COUNT)
    on_unschedulable: Unschedulable = knob(
        Unschedulable.STARVE, "a request that can never run: `starve` (kept queued, as the "
        "lesson) or `reject` at arrival with the reason")
    step_order: StepOrder = knob(
        StepOrder.DECODE_FIRST, "`decode_first` (decodes, then chunks under way, then "
        "admissions), `prefill_first` (what `mix_prefill_decode: false` spells), "
        "`running_loop` (vLLM V1: running requests in admission order, decodes and chunks "
        "alike, blocks per chunk)")
    max_model_len: int | None = knob(
        None, "a prompt of `max_model_len` tokens or more is `rejected` at arrival with vLLM's "
        "message; outputs stop at `max_model_len` tokens", Range(ge=2))
    null_block: bool = knob(
        False, "one of `num_blocks` is never usable (vLLM V1's null block: `num_blocks` is what "
        "vLLM logs); the watermark still counts from `num_blocks`")
    scheduler_reserve_full_isl: bool = knob(
        True, "under `running_loop`: admit only if the whole prompt (+ outputs when resumed) "
        "fits the free blocks now")
    preemption_warning: bool = knob(
        False, "vLLM V0's preemption warning as a `warning` event on the 1st, 51st, 101st ... "
        "preemption")
    swapped_fifo: bool = knob(
        False, "swapped-out requests wait in their own first-in-first-out queue ahead of the "
        "waiting queue (vLLM V0); false: on the preempted stack, newest first")
    delay_factor: float = knob(
        0.0, "vLLM V0: prompts are admitted only once the oldest waiting request has waited "
        "more than `delay_factor` x the last prompt step's latency, or when nothing runs",
        NON_NEGATIVE)
    max_queued_requests: int | None = knob(
        None, "SGLang's limit: an arrival that finds this many requests waiting is `rejected` "
        "(preempted requests waiting count too)", COUNT)
    enable_prefix_caching: bool = knob(
        False, "KV blocks get identity: a request finds the full blocks of its prefix that "
        "earlier requests computed, and its own on resume (see "
        "[Prefix caching](engine.md#prefix-caching))")
    prefix_accounting: PrefixAccounting = knob(
        PrefixAccounting.V1, "what a hit changes at admission: `v1` cached tokens are not "
        "scheduled and only fresh blocks plus unheld hit blocks count against the free ones; "
        "`v0` cached tokens are free for the budget, every prompt block is counted, partial "
        "chunks round down to whole blocks")
    prefix_cache: str = knob(
        "hashed", "which cache: " + " or ".join(
            f"`{name}` ({summary})" for name, (_, summary) in PREFIX_CACHES.items()),
        choices=PREFIX_CACHES)
    admission_rule: AdmissionRule = knob(
        AdmissionRule.BLOCKS, "`blocks`: an admission needs its prompt's blocks above the "
        "watermark; `future_tokens` (SGLang's `PrefillAdder`, not with `running_loop`): it "
        "also needs room for the decode tokens the running requests are still expected to "
        "write, with the batch-full latch (see "
        "[`sglang`](presets.md#sglang-sglang-0523-admission-checked-against-sglangs-own-classes))")
    max_prefill_tokens: int = knob(
        16384, "under `future_tokens`: prompt tokens one step may prefill (pages rounded up); "
        "without chunking the first request of a step may exceed it", COUNT)
    schedule_conservativeness: float = knob(
        1.0, "under `future_tokens`: SGLang's flag; the initial `new_token_ratio` is "
        "`min(0.7 x it, 1)`", POSITIVE)
    rejection_texts: RejectionTexts = knob(
        RejectionTexts.KVSCHED, "whose words a `rejected` request's reason uses: `kvsched`, or "
        "`vllm_v0` (vLLM 0.8.5's scheduler warnings; a prompt of exactly `max_model_len` then "
        "runs, and outputs stop one token later: once the sequence exceeds `max_model_len`)")
    max_num_partial_prefills: int = knob(
        1, "vLLM V0's chunked mode (needs `chunked_prefill` and `step_order: decode_first`): at "
        "most this many prefills under way; each chunk of a step is at most "
        "`max_num_batched_tokens // ` the prefills that step could run; 1 = off", COUNT)
    max_long_partial_prefills: int = knob(
        1, "of those, at most this many long ones (over `long_prefill_token_threshold`, which "
        "then only classifies, default 4% of `max_model_len`): a long head waits and shorter "
        "prompts behind it pass", COUNT)
    enable_priority_scheduling: bool = knob(
        False, "SGLang's flag, under `future_tokens`: a request that finds the batch full "
        "preempts running requests whose `priority` is worse (larger) by more than "
        "`priority_scheduling_preemption_threshold` (10); the queue order stays `policy` (use "
        "`priority`)")
    priority_scheduling_preemption_threshold: int = knob(
        10, "SGLang's: the priority gap a running request must exceed to be preempted for a "
        "waiting one", NON_NEGATIVE_COUNT)
    append_free_block: bool = knob(
        False, "vLLM V0's `can_append_slots`: a decode needs a free block even when its last "
        "block has room (and, with chunking, so does a chunk under way unless its prompt ends "
        "on a block boundary); else the tail is preempted")
    priority_preemption: bool = knob(
        False, "vLLM V0 with `policy: priority`, chunking off: the queue keeps arrival order "
        "and is sorted by (priority, arrival) only in a step that admits no prefill, after "
        "worse running requests are preempted from the (sorted) tail until the head fits")
    priority_orders_queue: bool = knob(
        True, "false: the queue policy orders nothing, requests wait in arrival order (V0's "
        "chunked scheduler never sorts)")
    swap_in_front: bool = knob(
        False, "a request swapped in joins the front of the running queue (it becomes the last "
        "victim)")
    prefill_past_swapped: bool = knob(
        False, "prompts are admitted while requests wait swapped out (after the step's "
        "swap-ins)")
    swap_in_after_preempt: bool = knob(
        True, "false: no swap-in in a step that preempted")
    readmit_victims: bool = knob(
        True, "false: a request preempted in a step re-enters the queue after that step's "
        "admissions")
    swap_prefills: bool = knob(
        False, "with `preemption: swap`, a request preempted mid-prefill is swapped out too, "
        "its chunks kept, and swapped back in only when the rest of its prompt fits the "
        "step's budget")
    async_scheduling: bool = knob(
        False, "vLLM V1's flag (`--async-scheduling`, on by default in `vllm serve` 0.33), "
        "`running_loop` only: each step is decided while the step before it runs, as vLLM's "
        "`AsyncScheduler` behind the engine core's batch queue: the requests that step "
        "finishes still hold their blocks and places in the decision (not scheduled, possible "
        "victims), an arrival while a step runs waits for the decision after, and a decision "
        "that schedules nothing costs no time. First tokens and finishes are seen at the end "
        "of the step that computed them, as before; see "
        "[`vllm_v1`](presets.md#vllm_v1-vllm-0330-v1-engine-checked-against-the-real-scheduler)")
    kv_offload_blocks: int = knob(
        0, "blocks of the host-memory tier under the prefix cache (`kvsched.kvcache.offload`) "
        "that evicted cached blocks go to (0: none); from `kv_offload.host_blocks`",
        NON_NEGATIVE_COUNT, scenario=False)
    kv_offload_gbps: float = knob(
        0.0, "the host tier's link, gigabits per second; from `kv_offload.bandwidth_gbps`",
        NON_NEGATIVE, scenario=False)
    kv_offload_block_bytes: float | None = knob(
        None, "one block's KV bytes on the host link (None: the time model's, a roofline's); "
        "from `kv_offload.block_bytes`", POSITIVE, scenario=False)

    def __post_init__(self) -> None:
        for name, values in _RANGES.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            problem = "must be a number" if value is None else values.problem(value)
            if problem:
                raise ValueError(f"{name} {problem}, got {shown(value)}")
        for name, kind in _ENUMS.items():  # library callers may give an enum's string value
            object.__setattr__(self, name, kind(getattr(self, name)))
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be {' or '.join(choices)}, got "
                                 f"{getattr(self, name)!r}")
        if self.kv_offload_blocks and not (self.enable_prefix_caching
                                           and self.kv_offload_gbps > 0):
            raise ValueError("a host tier (kv_offload_blocks) needs enable_prefix_caching and "
                             "kv_offload_gbps > 0")
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


KNOBS: tuple[Any, ...] = fields(EngineConfig)
"""Every knob's declaration (a `dataclasses.Field`; `knob` put its doc, range and choices in
`metadata`), in order."""

KNOB_TYPES: Mapping[str, Any] = MappingProxyType(get_type_hints(EngineConfig))
"""Each knob's type (`int`, `float | None`, an enum...)."""

_RANGES = {k.name: k.metadata["range"] for k in KNOBS if k.metadata["range"] is not None}
_OPTIONAL = {name for name, kind in KNOB_TYPES.items() if type(None) in get_args(kind)}
_ENUMS = {name: kind for name, kind in KNOB_TYPES.items()
          if isinstance(kind, type) and issubclass(kind, StrEnum)}
_CHOICES = {k.name: k.metadata["choices"] for k in KNOBS if k.metadata["choices"]}

ENGINE_DEFAULTS: Mapping[str, Any] = MappingProxyType({k.name: k.default for k in KNOBS})
"""Each engine key's default, for `kvsched.compat.first_conflict`'s rows that compare a key
with its own (`DEFAULT`)."""
