"""Step records as the run makes them: one row per exact step, one `Stretch` per decode
stretch, kept or streamed in chunks, with the sums the summary needs.

Why not one tuple per step: a day of traffic is tens of millions of steps, most of them in
stretches where only the time and the blocks in use change. The log keeps stretches whole,
hands each chunk to a sink (a CSV writer) as soon as it is full, and keeps in memory only
what the caller asked for.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, Protocol, cast

import numpy as np

from kvsched.floatsum import fold
from kvsched.records.mode import RecordMode as RecordMode  # (importable from here too)
from kvsched.records.rows import STEP_COLUMNS

try:
    import cython
except ImportError:  # (the source run as Python where Cython is not installed)
    from kvsched.compiled import PurePython as cython


class Stretch:
    """Steps `step` .. `step + num_steps - 1`, run in one move: every one decoded the same
    `num_decodes` requests and nothing else; only the last may finish requests.
    `starts` and `durations` hold each step's start and length, `blocks_used` the blocks in
    use as each batch ran."""

    __slots__ = ("step", "num_steps", "num_decodes", "num_running", "num_waiting", "starts",
                 "durations", "blocks_used", "kv_first", "num_finished", "mfu", "mbu",
                 "cached_blocks", "evicted_blocks")

    # (A plain class with its fields typed in steplog.pxd: a C struct in the compiled build.)
    def __init__(self, step: int, num_steps: int, num_decodes: int, num_running: int,
                 num_waiting: int, starts: list[float], durations: list[float],
                 blocks_used: list[int], kv_first: int, num_finished: int = 0) -> None:
        self.step = step
        self.num_steps = num_steps
        self.num_decodes = num_decodes
        self.num_running = num_running  # decoding + chunked prefills waiting for budget
        self.num_waiting = num_waiting
        self.starts = starts
        self.durations = durations
        self.blocks_used = blocks_used
        self.kv_first = kv_first  # KV tokens its first step reads (each later one: + decodes)
        self.num_finished = num_finished
        # per step, with a hardware time model (set by the engine)
        self.mfu: list[float] | None = None
        self.mbu: list[float] | None = None
        self.cached_blocks: list[int] | None = None  # per step, with prefix caching on
        self.evicted_blocks: list[int] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stretch) and all(
            getattr(self, name) == getattr(other, name) for name in Stretch.__slots__)

    def __repr__(self) -> str:
        return (f"Stretch(step={self.step}, num_steps={self.num_steps}, "
                f"num_decodes={self.num_decodes})")

    @property
    def end(self) -> float:
        return self.starts[-1] + self.durations[-1]


Segment = tuple | Stretch

_NUM_STEPS = attrgetter("num_steps")
_NUM_DECODES = attrgetter("num_decodes")
_DURATIONS = attrgetter("durations")
_BLOCKS_USED = attrgetter("blocks_used")
Sink = Callable[[list[Segment]], None]

COMPACT_COLUMNS = ("step", "num_steps", *STEP_COLUMNS[1:])
"""`steps.csv` under `--records compact`: one row per exact step (`num_steps` 1) or per
decode stretch. A stretch row holds its first step and start `time`; `duration`, the token
counts and `num_finished` are sums over the stretch; `blocks_used` and `blocks_free` are as
its last batch ran (blocks only grow within a stretch: the last is the peak); `mfu` and
`mbu` are means over its steps weighted by their durations."""
COMPACT_FLOATS = ("time", "duration", "thrash_ratio", "mfu", "mbu")
"""The float columns of `steps.csv`, full or compact (`CompactRows.floats` in this order)."""
COMPACT_INTS = tuple(name for name in COMPACT_COLUMNS if name not in COMPACT_FLOATS)


class Timeline:
    """Busy time and waiting-queue length of the steps, in equal buckets of start time over
    the arrival span `[start, end]`: what the overload detector reads, in bounded memory.
    A figure over a time range is exact up to the one bucket at each end of the range
    (1/`num_buckets` of the span). `busy`, `waiting` and `count` are typed arrays (each
    step adds to them as C numbers in the compiled build)."""

    __slots__ = ("start", "end", "width", "size", "busy", "waiting", "count", "_busy",
                 "_waiting", "_count")

    def __init__(self, start: float, end: float, num_buckets: int = 4096) -> None:
        self.start = start
        self.end = end
        self.width = (end - start) / num_buckets if end > start else 0.0
        self.size = num_buckets if end > start else 0
        zeros = bytes(8 * self.size)
        self.fill(array("d", zeros), array("q", zeros), array("q", zeros))

    def fill(self, busy: Sequence[float], waiting: Sequence[int],
             count: Sequence[int]) -> None:
        """Take these sums per bucket (`size` each): the compiled loop's, or zeros."""
        self.busy = busy if type(busy) is array else array("d", busy)
        self.waiting = waiting if type(waiting) is array else array("q", waiting)
        self.count = count if type(count) is array else array("q", count)
        self._busy = self.busy  # (typed views of the arrays in the compiled build)
        self._waiting = self.waiting
        self._count = self.count

    def _bucket(self, time: float) -> int:
        """The bucket of a step that starts at `time`; -1 outside the span."""
        if not self.width or time < self.start or time >= self.end:
            return -1
        return min(self.size - 1, int((time - self.start) / self.width))

    def add_rows(self, starts: tuple, durations: tuple, waiting: tuple) -> None:
        for start, duration, num_waiting in zip(starts, durations, waiting, strict=True):
            self.add_row(start, duration, num_waiting)

    def add_row(self, start: float, duration: float, num_waiting: int) -> None:
        k = self._bucket(start)
        if k >= 0:
            self._busy[k] += duration
            self._waiting[k] += num_waiting
            self._count[k] += 1

    def add_stretch(self, stretch: Stretch) -> None:
        starts = stretch.starts
        begin, end, width = starts[0], starts[-1], self.width
        if end < self.start or begin >= self.end or not width:
            return
        if begin >= self.start and end < self.end:  # the common case: one bucket
            top = self.size - 1
            first = min(top, int((begin - self.start) / width))
            if first == min(top, int((end - self.start) / width)):
                self._busy[first] += fold(stretch.durations)
                self._waiting[first] += stretch.num_waiting * len(starts)
                self._count[first] += len(starts)
                return
        self._add_spread(stretch)

    def _add_spread(self, stretch: Stretch) -> None:
        """A stretch over several buckets: cut where its start times change bucket."""
        starts = stretch.starts
        size = self.size

        def key(time: float) -> int:  # monotone: -1 before the span, size after it
            k = self._bucket(time)
            return k if k >= 0 else (-1 if time < self.start else size)

        durations, waiting = stretch.durations, stretch.num_waiting
        lo = 0
        while lo < len(starts):
            k = key(starts[lo])
            if k == size:
                break
            hi = bisect_right(starts, k, lo, key=key)
            if k >= 0:
                self._busy[k] += fold(durations[lo:hi])
                self._waiting[k] += waiting * (hi - lo)
                self._count[k] += hi - lo
            lo = hi

    def bucket_starts(self) -> list[float]:
        return [self.start + k * self.width for k in range(self.size)]


class StepStats:
    """Running sums over every step, added as each step or stretch is logged (in step order,
    so float sums match a plain sum)."""

    __slots__ = ("num_steps", "end", "busy_time", "prefill_tokens", "decode_tokens",
                 "recomputed_tokens", "swapped_blocks", "blocks_used_sum", "peak_blocks_used",
                 "thrash_ratio_max", "backpressure_steps", "timeline", "has_utilisation",
                 "_mfu_sum", "_mbu_sum", "evicted_blocks")

    # (A plain class typed in steplog.pxd: C sums in the compiled build.)
    def __init__(self) -> None:
        self.num_steps = 0
        self.end = 0.0  # end of the last step
        self.busy_time = 0.0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.recomputed_tokens = 0
        self.swapped_blocks = 0
        self.blocks_used_sum = 0
        self.peak_blocks_used = 0
        self.thrash_ratio_max = 0.0
        self.backpressure_steps = 0
        self.timeline: Timeline | None = None
        # the sums of the steps' figures, once a step had one (a hardware time model; one
        # model per run: all steps or none)
        self.has_utilisation = False
        self._mfu_sum = 0.0
        self._mbu_sum = 0.0
        self.evicted_blocks = 0

    @property
    def mfu_sum(self) -> float | None:
        """The steps' MFU summed; None when no step had one (no hardware time model)."""
        return self._mfu_sum if self.has_utilisation else None

    @property
    def mbu_sum(self) -> float | None:
        return self._mbu_sum if self.has_utilisation else None

    def add_rows(self, rows: list[tuple]) -> None:
        for row in rows:
            self.add_row(row)

    def add_row(self, row: tuple) -> None:
        """One exact step, as its STEP_COLUMNS row (a tuple, or a StepOutcome)."""
        values = cython.cast(tuple, row)  # (see CompactRows.add_row)
        start = values[1]
        duration = values[2]
        used = values[10]
        if self.timeline is not None:
            self.timeline.add_row(start, duration, values[4])
        self.num_steps += 1
        self.end = start + duration
        self.busy_time += duration
        prefill, decoded, recomputed = values[6], values[7], values[8]
        self.prefill_tokens += prefill
        self.decode_tokens += decoded
        self.recomputed_tokens += recomputed
        self.blocks_used_sum += used
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used
        swapped_out, swapped_in = values[15], values[16]
        self.swapped_blocks += swapped_out + swapped_in
        ratio = values[17]
        if ratio > self.thrash_ratio_max:
            self.thrash_ratio_max = ratio
        signal, evicted = values[18], values[22]
        self.backpressure_steps += signal
        self.evicted_blocks += evicted
        mfu = values[19]
        if mfu is not None:
            self.has_utilisation = True
            self._mfu_sum += mfu
            self._mbu_sum += values[20]

    def add_stretch(self, stretch: Stretch) -> None:
        """One decode stretch: its steps' sums, in step order."""
        if self.timeline is not None:
            self.timeline.add_stretch(stretch)
        self.num_steps += stretch.num_steps
        self.end = stretch.end
        self.busy_time = fold(stretch.durations, self.busy_time)
        self.decode_tokens += stretch.num_decodes * stretch.num_steps
        total = 0
        for used in stretch.blocks_used:
            total += used
        self.blocks_used_sum += total
        used = stretch.blocks_used[-1]
        if used > self.peak_blocks_used:
            self.peak_blocks_used = used
        if stretch.evicted_blocks is not None:
            for evicted in stretch.evicted_blocks:
                self.evicted_blocks += evicted
        if stretch.mfu is not None and stretch.mbu is not None:
            self.has_utilisation = True
            self._mfu_sum = fold(stretch.mfu, self._mfu_sum)
            self._mbu_sum = fold(stretch.mbu, self._mbu_sum)


def stretch_rows(stretch: Stretch, num_blocks: int) -> Iterator[tuple]:
    """A stretch as the STEP_COLUMNS rows the step-by-step engine would have made."""
    n, last = stretch.num_decodes, stretch.num_steps - 1
    running, waiting = stretch.num_running, stretch.num_waiting
    mfu = stretch.mfu or repeat(None, stretch.num_steps)
    mbu = stretch.mbu or repeat(None, stretch.num_steps)
    for k, (start, duration, used, step_mfu, step_mbu) in enumerate(zip(
            stretch.starts, stretch.durations, stretch.blocks_used, mfu, mbu, strict=True)):
        yield (stretch.step + k, start, duration, running, waiting, 0, 0, n, 0, n, used,
               num_blocks - used, 0, 0, stretch.num_finished if k == last else 0, 0, 0,
               0.0, 0, step_mfu, step_mbu,
               stretch.cached_blocks[k] if stretch.cached_blocks else 0,
               stretch.evicted_blocks[k] if stretch.evicted_blocks else 0)


class CompactRows:
    """COMPACT_COLUMNS rows made as each segment is logged, into typed columns (`ints`: a
    row per integer column, `floats`: time, duration, thrash_ratio, mfu, mbu), up to
    `limit` segments: what a compact `steps.csv` chunk writes, with no row or stretch kept
    until then. An exact step's row is itself with `num_steps` 1; a stretch's holds its
    first step and start, the durations' sum (in step order), its decoded tokens and
    finishes, blocks as its last batch ran, mfu and mbu as means weighted by the durations
    (none without a hardware time model), cached blocks after its last step and evicted
    blocks summed."""

    __slots__ = ("ints", "floats", "size", "num_blocks", "no_mfu", "_ints", "_floats")

    # (A plain class typed in steplog.pxd: its columns are C arrays in the compiled build.)
    def __init__(self, limit: int, num_blocks: int) -> None:
        self.ints = np.zeros((len(COMPACT_INTS), limit), dtype=np.int64)
        self.floats = np.zeros((len(COMPACT_FLOATS), limit), dtype=np.float64)
        self._ints = self.ints
        self._floats = self.floats
        self.size = 0
        self.num_blocks = num_blocks
        self.no_mfu = False  # no segment has mfu or mbu (one time model per run: all or none)

    def add_row(self, row: tuple) -> None:
        """One exact step, as its STEP_COLUMNS row."""
        # Read as the tuple it is (compiled: a typed tuple, each item a C read): a StepOutcome
        # (a NamedTuple, a Python subclass of tuple) is otherwise indexed through its type's
        # __getitem__, and a copy to a plain tuple costs as much as the reads.
        values = cython.cast(tuple, row)
        i = self.size
        ints = self._ints  # (one at a time: a pair would make Python objects of them)
        floats = self._floats
        if not i:
            self.no_mfu = values[19] is None
        ints[0, i] = values[0]
        ints[1, i] = 1
        for k in range(3, 17):  # num_running .. swapped_in_blocks
            ints[k - 1, i] = values[k]
        ints[16, i] = values[18]
        ints[17, i] = values[21]
        ints[18, i] = values[22]
        floats[0, i] = values[1]
        floats[1, i] = values[2]
        floats[2, i] = values[17]
        if not self.no_mfu:
            floats[3, i] = values[19]
            floats[4, i] = values[20]
        self.size = i + 1

    def add_stretch(self, stretch: Stretch) -> None:
        """One decode stretch, as one row."""
        i = self.size
        ints = self._ints  # (one at a time: a pair would make Python objects of them)
        floats = self._floats
        times = stretch.durations
        duration = fold(times)
        step_mfu, step_mbu = stretch.mfu, stretch.mbu
        if not i:
            self.no_mfu = step_mfu is None
        if not self.no_mfu:  # (fold(map(mul, mfu, times)), inlined)
            assert step_mfu is not None and step_mbu is not None
            flops = bytes_moved = 0.0
            for k in range(len(times)):  # (typed: C products, no float object per step)
                each, seconds = step_mfu[k], times[k]
                flops += each * seconds
            for k in range(len(times)):
                each, seconds = step_mbu[k], times[k]
                bytes_moved += each * seconds
            floats[3, i] = flops / duration
            floats[4, i] = bytes_moved / duration
        evicted = 0
        if stretch.evicted_blocks:
            for blocks in stretch.evicted_blocks:
                evicted += blocks
        decoded = stretch.num_decodes * stretch.num_steps
        used = stretch.blocks_used[-1]
        ints[0, i] = stretch.step
        ints[1, i] = stretch.num_steps
        ints[2, i] = stretch.num_running
        ints[3, i] = stretch.num_waiting
        ints[4, i] = 0
        ints[5, i] = 0
        ints[6, i] = decoded
        ints[7, i] = 0
        ints[8, i] = decoded
        ints[9, i] = used
        ints[10, i] = self.num_blocks - used
        for k in range(11, 17):  # num_preempted, num_admitted, ..., backpressure
            ints[k, i] = 0
        ints[13, i] = stretch.num_finished
        ints[17, i] = stretch.cached_blocks[-1] if stretch.cached_blocks else 0
        ints[18, i] = evicted
        floats[0, i] = stretch.starts[0]
        floats[1, i] = duration
        floats[2, i] = 0.0
        self.size = i + 1

    def add(self, segments: list[Segment]) -> None:
        for segment in segments:
            if isinstance(segment, tuple):
                self.add_row(segment)
            else:
                self.add_stretch(segment)

    def columns(self) -> list[Any]:
        """The rows so far, a column per COMPACT_COLUMNS name: int64 and float64 arrays
        (views of the buffers: written before the next `clear`), mfu and mbu [None, ...]
        without a hardware time model."""
        n = self.size
        ints, floats = self.ints, self.floats
        out: list[Any] = []
        for name in COMPACT_COLUMNS:
            if name in COMPACT_FLOATS:
                k = COMPACT_FLOATS.index(name)
                out.append([None] * n if self.no_mfu and k >= 3 else floats[k, :n])
            else:
                out.append(ints[COMPACT_INTS.index(name), :n])
        return out

    def clear(self) -> None:
        self.size = 0


def compact_row(stretch: Stretch, num_blocks: int) -> tuple:
    """A stretch as one COMPACT_COLUMNS row (see `CompactRows`)."""
    rows = CompactRows(1, num_blocks)
    rows.add_stretch(stretch)
    return tuple(column[0] if type(column) is list else column[0].item()
                 for column in rows.columns())


@dataclass(frozen=True, slots=True)
class SegmentBlock:
    """Consecutive segments as columns, as the compiled loop (`kvsched.fastcore`) makes them:
    `ints` holds a row per segment (SEGMENT_FIELDS), `duration_sum` each one's summed
    durations (from 0, in step order), `start`, `duration` and `used` each step's start
    time, length and blocks in use; nothing a segment holds is a recompute, a swap, a
    preemption, a prefix-cache figure or a thrash signal. An exact step's row is a
    segment of one step (`is_row` 1), with its own `row_free`."""

    ints: np.ndarray
    duration_sum: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    used: np.ndarray

    def column(self, name: str) -> np.ndarray:
        return self.ints[:, SEGMENT_FIELDS.index(name)]

    def __len__(self) -> int:
        return len(self.ints)

    def segments(self, num_blocks: int) -> list[Segment]:
        """The rows and stretches the Python loop makes (for a log that keeps them, or a
        sink that takes only those)."""
        out: list[Segment] = []
        starts, durations = self.start.tolist(), self.duration.tolist()
        used = self.used.tolist()
        offset = 0
        for (step, k, is_row, running, waiting, prefills, prefill_tokens, decodes, tokens,
             admitted, finished, kv_first, row_free) in self.ints.tolist():
            if is_row:
                out.append((step, starts[offset], durations[offset], running, waiting, prefills,
                            prefill_tokens, decodes, 0, tokens, used[offset], row_free, 0,
                            admitted, finished, 0, 0, 0.0, 0, None, None, 0, 0))
            else:
                out.append(Stretch(step, k, decodes, running, waiting,
                                   starts[offset:offset + k], durations[offset:offset + k],
                                   used[offset:offset + k], kv_first, finished))
            offset += k
        return out


SEGMENT_FIELDS = ("step", "num_steps", "is_row", "num_running", "num_waiting",
                  "num_prefills", "prefill_tokens", "num_decodes", "num_tokens",
                  "num_admitted", "num_finished", "kv_first", "row_free")
"""The columns of `SegmentBlock.ints` (`kvsched/_fastcore.c` writes them in this order);
`num_decodes` and `num_tokens` are per step."""


class RowsSink(Protocol):
    """A sink that takes compact rows as a `StepLog` makes them (a compact `steps.csv`)."""

    takes_rows: bool

    def rows(self, rows: CompactRows) -> None: ...


CHUNK = 1 << 15
"""Segments a `StepLog` holds before it hands them on (a stretch can hold many steps)."""


def replica_chunk(num_replicas: int) -> int:
    """Each replica's chunk in a cluster: together they hold what one run's log holds."""
    return max(256, CHUNK // max(1, num_replicas))


class StepLog:
    """Collects a run's step records; see the module docstring.

    `keep`: hold every segment (for `RunResult.steps`); `sink`: called with each chunk of
    segments, in order, as it fills and at `close()`. A sink whose `takes_rows` is true
    (a compact `steps.csv`) is handed `CompactRows` instead (`sink.rows`), made as each
    segment comes, when nothing is kept: no row or stretch lives until its chunk is full.
    """

    __slots__ = ("num_blocks", "stats", "kept", "_sink", "_chunk", "_limit", "_compact")

    def __init__(self, num_blocks: int, keep: bool = True, sink: Sink | None = None,
                 chunk: int = CHUNK) -> None:
        self.num_blocks = num_blocks
        self.stats = StepStats()
        self.kept: list[Segment] | None = [] if keep else None
        self._sink = sink
        self._chunk: list[Segment] = []
        self._limit = chunk
        self._compact: CompactRows | None = None
        if not keep and getattr(sink, "takes_rows", False):
            self._compact = CompactRows(chunk, num_blocks)

    def row(self, row: tuple) -> None:
        compact = self._compact
        if compact is not None:
            self.stats.add_row(row)
            compact.add_row(row)
            if compact.size >= self._limit:
                self.flush()
            return
        self.stats.add_row(row)
        chunk = self._chunk
        chunk.append(row)
        if len(chunk) >= self._limit:
            self.flush()

    def stretch(self, stretch: Stretch) -> None:
        self.stats.add_stretch(stretch)
        compact = self._compact
        if compact is not None:
            compact.add_stretch(stretch)
            if compact.size >= self._limit:
                self.flush()
            return
        chunk = self._chunk
        chunk.append(stretch)
        if len(chunk) >= self._limit:
            self.flush()

    def flush(self) -> None:
        compact = self._compact
        if compact is not None:
            if compact.size:
                cast(RowsSink, self._sink).rows(compact)
                compact.clear()
            return
        chunk = self._chunk
        if not chunk:
            return
        if self._sink is not None:
            self._sink(chunk)
        if self.kept is not None:
            self.kept.extend(chunk)
        self._chunk = []

    def block(self, block: SegmentBlock) -> None:
        """Segments made in bulk by the compiled loop, whose sums it keeps in `stats`
        itself: to the sink (as columns when it takes them) and, if kept, as segments."""
        self.flush()
        sink = self._sink
        take = getattr(sink, "block", None)
        if take is not None:
            take(block)
        rows_sink = sink if take is None else None
        if rows_sink is not None or self.kept is not None:
            segments = block.segments(self.num_blocks)  # (made once for both)
            if rows_sink is not None:
                rows_sink(segments)
            if self.kept is not None:
                self.kept.extend(segments)

    def close(self) -> StepStats:
        self.flush()
        return self.stats

    def rows(self) -> list[tuple]:
        """Every kept step as a STEP_COLUMNS row (stretches expanded)."""
        if self.kept is None:
            raise ValueError("this run did not keep its step records (records=summary or "
                             "streamed to a file)")
        out: list[tuple] = []
        for segment in self.kept:
            if isinstance(segment, tuple):
                out.append(segment)
            else:
                out.extend(stretch_rows(segment, self.num_blocks))
        return out
