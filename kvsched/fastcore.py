"""The compiled loop (`kvsched/_fastcore.c`) for the runs it carries, and the choice of it.

Why: the Python loop costs tens of microseconds per event, and a day of traffic has
millions of events. The C loop runs the first engine's rules (decode-first steps, FCFS,
constant or linear step times, no prefix cache, no admission gate, no batches recorded)
with the same floats in the same order, and hands back the same records, step rows,
stretches and events (head-of-line blocks included). Whatever else a run meets on the way
(a preemption, a budget smaller than the running batch, `max_steps`) makes it give up, and
`simulate` runs the Python engine from the start: the Python engine stays the reference,
and tests/test_fastcore.py compares the two over random workloads.

`KVSCHED_CORE=python` in the environment turns the C loop off (to compare, or to profile).
"""

from __future__ import annotations

import gc
import math
from typing import Any

import numpy as np

from kvsched.admission import SloAdmission
from kvsched.config import EngineConfig, RejectionTexts, StepOrder, Victim
from kvsched.histogram import GapHistogram
from kvsched.partial_prefills import make_partial_prefills
from kvsched.policies.base import Policy
from kvsched.policies.fcfs import Fcfs
from kvsched.records.fastcsv import _fastcore, available, format_csv, format_runs, read_csv  # noqa: F401  (kept here for callers)
from kvsched.records.steplog import SEGMENT_FIELDS, SegmentBlock, StepLog
from kvsched.records.table import RecordTable
from kvsched.request_columns import RequestColumns
from kvsched.reservation import make_reservation
from kvsched.timing import LinearStep, TimeModel, constant_duration

_LARGE = 2 ** 62
"""Settings and lengths from here on stay with the Python loop (its integers do not
overflow)."""

_RING_BLOCKS = 1 << 16
"""Larger blocks stay with the Python loop: the compiled loop keeps a bucket per decode pass
up to a block ahead (its block boundaries)."""


def carries(requests: Any, config: EngineConfig, policy: Policy, clock: TimeModel,
            admission: SloAdmission | None, record_batches: bool) -> bool:
    """Whether the compiled loop runs these rules (it may still give up on the way)."""
    if not available() or type(requests) is not RequestColumns or not len(requests):
        return False
    if type(policy) is not Fcfs or admission is not None or record_batches:
        return False
    if _prices(clock) is None:
        return False
    cfg = config
    if max(cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.num_blocks, cfg.block_size,
           cfg.max_steps, cfg.long_prefill_token_threshold) >= _LARGE:
        return False  # beyond the loop's 64-bit counters (a "no limit" max_steps, say)
    if cfg.block_size > _RING_BLOCKS:
        return False
    if (cfg.step_order is not StepOrder.DECODE_FIRST or cfg.victim is Victim.QUEUE_TAIL
            or cfg.enable_prefix_caching or cfg.delay_factor or cfg.max_model_len is not None
            or cfg.max_queued_requests is not None or cfg.append_free_block
            or cfg.priority_preemption or cfg.rejection_texts is not RejectionTexts.KVSCHED
            or make_reservation(cfg) is not None or make_partial_prefills(cfg) is not None):
        return False
    arrival = requests.arrival_time
    if not (np.isfinite(arrival).all() and arrival.max() < 2.0 ** 53):
        return False  # (the step clock counts steps to an arrival in 64 bits)
    # A request that can never run is named at the end: the Python loop does that.
    prompt = np.asarray(requests.prompt_len, dtype=np.int64)
    output = np.asarray(requests.output_len, dtype=np.int64)
    if int(prompt.max()) + int(output.max()) >= _LARGE:
        return False
    lifetime = -(-(prompt + output - 1) // cfg.block_size)
    if (lifetime > cfg.usable_blocks - cfg.watermark_blocks).any():
        return False
    return bool(cfg.chunked_prefill or not (prompt > cfg.max_num_batched_tokens).any())


def _prices(clock: TimeModel) -> tuple[float, float, float, float] | None:
    """(base, per prefill token, per decode, per KV token read) of the step times the
    compiled loop prices: a constant step is its base; None for the other models."""
    step = constant_duration(clock)
    if step is not None:
        return (step, 0.0, 0.0, 0.0) if 0 < step < math.inf else None
    if type(clock) is LinearStep and all(math.isfinite(price) for price in (
            clock.base, clock.per_prefill_token, clock.per_decode, clock.per_kv_token,
            clock.per_swapped_block)):  # (an infinite swap price makes NaN steps in Python)
        return clock.base, clock.per_prefill_token, clock.per_decode, clock.per_kv_token
    return None


HELD_BYTES = 32 << 20
"""The most record bytes (step columns, event lines) the first pass holds back: a run whose
records fit is run once; a longer one is found out (a pass giving up) before it streams."""


class _Outgrown(Exception):
    """The first pass's records outgrew `HELD_BYTES`."""


def run(requests: RequestColumns, config: EngineConfig, clock: TimeModel,
        records: RecordTable, log: StepLog, events: list[tuple], drain: Any,
        drain_at: int, progress: Any, stretches: bool, itl: bool, event_text: Any = None,
        kept: list[tuple] | None = None) -> tuple[int, GapHistogram | None] | None:
    """Run the loop in C: (free blocks at the end, the inter-token gap histogram or None
    without `itl`), with `records`, `log` and `events` filled as the Python loop fills them;
    None if it gave up. `event_text`, if given, takes the events as CSV lines (bytes)
    instead of `events`, and `kept` the head-of-line ones (what the diagnosis reads).

    Nothing reaches a streaming `log`, `drain` or `event_text` of a run that gives up (the
    Python loop then makes it again). The first pass holds its records back and hands them
    on at the end; when they outgrow `HELD_BYTES`, a dry pass (no rows or events, a tenth
    of the work) finds out whether the run gives up, then a last pass streams them."""
    prices = _prices(clock)
    assert _fastcore is not None and prices is not None
    order = np.argsort(requests.arrival_time, kind="stable")  # as kvsched.turns orders them
    ids = None if requests.id_numbers is None else np.ascontiguousarray(
        np.asarray(requests.id_numbers, dtype=np.int64)[order])
    cfg = config
    chunk_cap = cfg.long_prefill_token_threshold or cfg.max_num_batched_tokens
    arrivals = (np.ascontiguousarray(requests.arrival_time[order]),
                np.ascontiguousarray(np.asarray(requests.prompt_len, dtype=np.int64)[order]),
                np.ascontiguousarray(np.asarray(requests.output_len, dtype=np.int64)[order]),
                order.astype(np.int64), ids)
    columns = (None, records.status, records.first_scheduled_time, records.first_token_time,
               records.finish_time, records.max_token_gap, records.ttft_steps,
               records.generated_tokens, records.prefix_hit_tokens)
    fields = len(SEGMENT_FIELDS)
    kept = [] if kept is None else kept

    def take_block(ints: bytes, sums: bytes, starts: bytes, durations: bytes,
                   used: bytes) -> None:
        log.block(SegmentBlock(np.frombuffer(ints, dtype=np.int64).reshape(-1, fields),
                               np.frombuffer(sums, dtype=np.float64),
                               np.frombuffer(starts, dtype=np.float64),
                               np.frombuffer(durations, dtype=np.float64),
                               np.frombuffer(used, dtype=np.int64)))

    # What the first pass holds back: blocks, event lines, drained chunks of events.
    held_blocks: list[tuple[bytes, ...]] = []
    held_text: list[bytes] = []
    held_events: list[list[tuple]] = []
    held = [0]

    def hold(size: int) -> None:
        held[0] += size
        if held[0] > HELD_BYTES:
            raise _Outgrown

    def hold_block(*parts: bytes) -> None:
        held_blocks.append(parts)
        hold(sum(len(part) for part in parts))

    def hold_text(text: bytes) -> None:
        held_text.append(text)
        hold(len(text))

    def hold_events() -> None:
        held_events.append(events[:])
        hold(300 * len(events))  # (about what an event's tuple and its values take)
        del events[:]

    timeline = log.stats.timeline
    span = (0.0, 0.0, 0) if timeline is None else (timeline.start, timeline.end,
                                                   len(timeline.busy))

    def one_pass(dry: bool, block: Any, drained: Any, text: Any, told: Any) -> Any:
        return _fastcore.run(
            (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.block_size,
             cfg.usable_blocks, cfg.watermark_blocks, cfg.chunked_prefill, chunk_cap, prices,
             clock.whole_steps, cfg.max_steps, stretches, itl, dry),
            arrivals, columns, (block, events, drained, drain_at, told, text, kept), span)

    # The loop makes a stretch's lists and a step's row per event, few of which live long:
    # the collector's passes over them cost a fifth of the run. Only the sinks and the
    # progress callback run meanwhile (no policy or router: the loop's rules are its own),
    # once per chunk or per thousands of steps; whatever cycles they make go at the end.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:  # (no progress shown: a pass whose records fit is short)
            out = one_pass(False, hold_block, hold_events if drain is not None else None,
                           hold_text if event_text is not None else None, None)
        except _Outgrown:
            held_blocks.clear(), held_text.clear(), held_events.clear()
            del events[:], kept[:]
            if one_pass(True, take_block, drain, event_text, progress) is None:
                return None
            out = one_pass(False, take_block, drain, event_text, progress)
        else:
            if out is None:
                return None
            for parts in held_blocks:
                take_block(*parts)
            for text in held_text:
                event_text(text)
            left = events[:]  # (fewer than drain_at: the caller drains them at the end)
            for chunk in held_events:
                events[:] = chunk
                drain()
            events[:] = left
    finally:
        if collecting:
            gc.enable()
    free, (count, total, bucketed, values), sums, (busy, queued, counted) = out
    stats = log.stats  # what the Python loop's rows and stretches would have added
    (stats.num_steps, stats.end, stats.busy_time, stats.prefill_tokens, stats.decode_tokens,
     stats.blocks_used_sum, stats.peak_blocks_used) = sums
    if timeline is not None:
        timeline.fill(busy, queued, counted)
    if not itl:
        return free, None
    histogram = GapHistogram.from_counts(count, total, values, bool(bucketed))
    return free, histogram
