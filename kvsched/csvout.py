"""CSV files of a run, written fast and the same bytes every time.

Floats are written as `%.10g` (enough for microseconds over a day), integers as they are,
None as an empty cell. Requests, events and batches go through the standard `csv` module
(minimal quoting: ids and details may hold commas). `steps.csv`, which holds a row per
step and so dominates a long run, goes through pyarrow's C++ CSV writer in chunks as the
run makes them: pyarrow because it writes integer columns at C speed, streams batch by
batch with one header, and is a well-kept wheel on every platform (polars would do as
well; pyarrow is the smaller dependency tree). Float columns are formatted in Python
first, so that both writers agree on every digit.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from pathlib import Path
from typing import IO, Any, cast

from kvsched.records import STEP_COLUMNS
from kvsched.scheduler import Stretch
from kvsched.steplog import COMPACT_COLUMNS, RecordMode, Segment, compact_row

FLOAT_FORMAT = "%.10g"

_STEP_FLOATS = frozenset({"time", "duration", "thrash_ratio", "mfu", "mbu"})
_CONSTANT = (3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 18)
"""STEP_COLUMNS indices a decode stretch holds constant over its steps."""


def cell_text(value: Any) -> str:
    """One value as the text of the CSV cell the writers produce."""
    if value is None:
        return ""
    if type(value) is float:
        return FLOAT_FORMAT % value
    return str(value)


def write_rows(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A CSV file of `rows` under `header`."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        fmt = FLOAT_FORMAT
        writer.writerows([fmt % v if type(v) is float else v for v in row] for row in rows)


class RowCsv:
    """A CSV file written chunk by chunk (an event sink, say)."""

    def __init__(self, path: Path, header: Sequence[str]) -> None:
        self._handle = path.open("w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._handle, lineterminator="\n")
        self._writer.writerow(header)

    def __call__(self, rows: Iterable[Sequence[Any]]) -> None:
        fmt = FLOAT_FORMAT
        self._writer.writerows([fmt % v if type(v) is float else v for v in row]
                               for row in rows)

    def close(self) -> None:
        self._handle.close()


def _formatted(values: list[float], cache: dict[float, str] | None = None) -> list[str]:
    fmt = FLOAT_FORMAT
    if values and values[0] is None:  # mfu, mbu without a hardware time model: all None
        return [""] * len(values)
    if cache is None:
        return [fmt % v for v in values]
    out = []
    for v in values:
        text = cache.get(v)
        if text is None:
            text = cache[v] = fmt % v
        out.append(text)
    return out


class StepCsv:
    """A `StepLog` sink writing `steps.csv` (full or compact) chunk by chunk.

    `replica`: a cluster replica's steps, with a last `replica` column holding it;
    `header=False` writes the rows only (one part of a cluster's file)."""

    def __init__(self, path: Path, mode: RecordMode, num_blocks: int,
                 replica: int | None = None, header: bool = True) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self._pa = pa
        self.mode = mode
        self.num_blocks = num_blocks
        self.replica = replica
        self.columns = STEP_COLUMNS if mode is RecordMode.FULL else COMPACT_COLUMNS
        fields = [pa.field(name, pa.string() if name in _STEP_FLOATS else pa.int64())
                  for name in self.columns]
        if replica is not None:
            fields.append(pa.field("replica", pa.int64()))
        self._schema = pa.schema(fields)
        self._handle: IO[bytes] = path.open("wb")
        options = pacsv.WriteOptions(include_header=header, quoting_style="none",
                                     quoting_header="none")
        self._writer = pacsv.CSVWriter(self._handle, self._schema, write_options=options)
        self._caches: dict[str, dict[float, str]] = {"duration": {}, "thrash_ratio": {}}

    def __call__(self, chunk: list[Segment]) -> None:
        columns = (self._full_columns(chunk) if self.mode is RecordMode.FULL
                   else self._compact_columns(chunk))
        pa = self._pa
        arrays = []
        for name, values in zip(self.columns, columns, strict=True):
            if name in _STEP_FLOATS:
                arrays.append(pa.array(_formatted(values, self._caches.get(name)),
                                       pa.string()))
            else:
                arrays.append(pa.array(values, pa.int64()))
        if self.replica is not None:
            arrays.append(pa.repeat(self.replica, len(arrays[0])).cast(pa.int64()))
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
        for cache in self._caches.values():
            if len(cache) > 4096:  # varying durations: keep memory flat
                cache.clear()

    def close(self) -> None:
        self._writer.close()
        self._handle.close()

    def _full_columns(self, chunk: list[Segment]) -> list[Any]:
        """One column per STEP_COLUMNS name, a row per step: the columns a stretch holds
        constant are repeated by numpy, segment by segment; the ones that change per step
        (times, blocks, utilisation) are chained from the stretches' lists."""
        import numpy as np

        num_blocks = self.num_blocks
        lengths: list[int] = []
        firsts: list[int] = []
        constant: list[list[Any]] = [[] for _ in _CONSTANT]
        finished: list[int] = []
        times: list[list[float]] = []
        durations: list[list[float]] = []
        used: list[list[int]] = []
        free: list[list[int]] = []
        mfu: list[Any] = []
        mbu: list[Any] = []
        cached: list[Any] = []
        evicted: list[Any] = []
        for segment in chunk:
            if type(segment) is tuple:
                row = cast(tuple, segment)
                lengths.append(1)
                firsts.append(row[0])
                for values, index in zip(constant, _CONSTANT, strict=True):
                    values.append(row[index])
                finished.append(row[14])
                times.append([row[1]])
                durations.append([row[2]])
                used.append([row[10]])
                free.append([row[11]])
                mfu.append((row[19],))
                mbu.append((row[20],))
                cached.append((row[21],))
                evicted.append((row[22],))
                continue
            stretch = cast(Stretch, segment)
            steps, n = stretch.num_steps, stretch.num_decodes
            lengths.append(steps)
            firsts.append(stretch.step)
            for values, value in zip(constant, (stretch.num_running, stretch.num_waiting, 0,
                                                0, n, 0, n, 0, 0, 0, 0, 0.0, 0), strict=True):
                values.append(value)
            finished.append(stretch.num_finished)
            times.append(stretch.starts)
            durations.append(stretch.durations)
            used.append(stretch.blocks_used)
            free.append([num_blocks - u for u in stretch.blocks_used])
            mfu.append(stretch.mfu or repeat(None, steps))
            mbu.append(stretch.mbu or repeat(None, steps))
            cached.append(stretch.cached_blocks or repeat(0, steps))
            evicted.append(stretch.evicted_blocks or repeat(0, steps))
        counts = np.array(lengths, dtype=np.int64)
        total = int(counts.sum())
        starts = np.cumsum(counts) - counts
        offsets = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        cols: list[Any] = [None] * len(STEP_COLUMNS)
        cols[0] = np.repeat(np.array(firsts, dtype=np.int64), counts) + offsets
        for values, index in zip(constant, _CONSTANT, strict=True):
            if index == 17:  # thrash_ratio: a float column, formatted as text later
                cols[index] = list(chain.from_iterable(
                    repeat(v, k) for v, k in zip(values, lengths, strict=True)))
            else:
                cols[index] = np.repeat(np.array(values, dtype=np.int64), counts)
        last = np.zeros(total, dtype=np.int64)
        last[starts + counts - 1] = finished
        cols[14] = last
        cols[1] = list(chain.from_iterable(times))
        cols[2] = list(chain.from_iterable(durations))
        cols[10] = np.fromiter(chain.from_iterable(used), dtype=np.int64, count=total)
        cols[11] = np.fromiter(chain.from_iterable(free), dtype=np.int64, count=total)
        cols[19] = list(chain.from_iterable(mfu))
        cols[20] = list(chain.from_iterable(mbu))
        cols[21] = np.fromiter(chain.from_iterable(cached), dtype=np.int64, count=total)
        cols[22] = np.fromiter(chain.from_iterable(evicted), dtype=np.int64, count=total)
        return cols

    def _compact_columns(self, chunk: list[Segment]) -> list[list[Any]]:
        rows: list[tuple] = []
        num_blocks = self.num_blocks
        for segment in chunk:
            if type(segment) is tuple:
                rows.append((segment[0], 1, *segment[1:]))
            else:
                rows.append(compact_row(segment, num_blocks))  # type: ignore[arg-type]
        return [list(values) for values in zip(*rows, strict=True)]
