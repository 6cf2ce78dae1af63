"""CSV files of a run, written fast and the same bytes every time.

Floats are written as `%.10g` (enough for microseconds over a day), integers as they are,
None as an empty cell. Requests, events and batches go through the standard `csv` module
(minimal quoting: ids and details may hold commas). `steps.csv`, which holds a row per
step and so dominates a long run, goes through pyarrow's C++ CSV writer in chunks as the
run makes them: pyarrow because it writes integer columns at C speed, streams batch by
batch with one header, and is a well-kept wheel on every platform (polars would do as
well; pyarrow is the smaller dependency tree). Its float columns are formatted by
`kvsched.records.floatfmt` (numpy and Arrow kernels, the bytes of `%.10g`), so that both writers
agree on every digit. Where the compiled formatter is built (`kvsched.records.fastcsv`), a
file's chunks are made CSV text in C a column at a time instead, the same bytes: a compact
file then never imports pyarrow (80 MiB and tens of ms of R1's run).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from itertools import chain, repeat
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from kvsched.arrow import int64s
from kvsched.records import fastcsv
from kvsched.records.floatfmt import cell_text, format_floats, formatted
from kvsched.records.rows import STEP_COLUMNS
from kvsched.records.steplog import (
    COMPACT_COLUMNS,
    COMPACT_FLOATS,
    CompactRows,
    RecordMode,
    Segment,
    SegmentBlock,
    Stretch,
)

_STEP_FLOATS = frozenset(COMPACT_FLOATS)  # (the float columns of either layout)
_CONSTANT = (3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 18)
"""STEP_COLUMNS indices a decode stretch holds constant over its steps."""
_ROWS = 1 << 18  # steps.csv rows built, formatted and written at once (a stretch adds at
# most MAX_STRETCH more): bounds the columns' memory and the text offsets (int32)


def _empty_texts(pa: Any, n: int) -> Any:
    """`n` empty strings (not nulls: the same cells either way, but one type throughout)."""
    return pa.StringArray.from_buffers(n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)),
                                       pa.py_buffer(b""))


def write_rows(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A CSV file of `rows` under `header`."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        chunks = getattr(rows, "csv_text", None)  # a table's rows (kvsched.records.table)
        if chunks is None:
            writer.writerows(formatted(rows))
            return
        for part in chunks():
            if isinstance(part, bytes):  # the same bytes as the csv module's, in C
                handle.write(part.decode("utf-8"))
            else:
                writer.writerows(formatted(part))


class RowCsv:
    """A CSV file written chunk by chunk (an event sink, say)."""

    def __init__(self, path: Path, header: Sequence[str]) -> None:
        self._handle = path.open("w", newline="", encoding="utf-8")
        self._writer = csv.writer(self._handle, lineterminator="\n")
        self._writer.writerow(header)

    def __call__(self, rows: Iterable[Sequence[Any]]) -> None:
        text = _rows_text(rows) if isinstance(rows, list) else None
        if text is None:
            self._writer.writerows(formatted(rows))
        else:
            self._handle.write(text.decode("utf-8"))

    def columns(self, columns: Sequence[Sequence[Any]], n: int) -> None:
        """`n` rows given as columns (written as `__call__` writes the rows they make)."""
        text = _columns_text(columns, n) if n else None
        if text is None:
            self._writer.writerows(formatted(zip(*columns, strict=True)))
        else:
            self._handle.write(text.decode("utf-8"))

    def text(self, lines: bytes) -> None:
        """Rows already made CSV lines (the compiled loop's events)."""
        self._handle.write(lines.decode("utf-8"))

    def close(self) -> None:
        self._handle.close()


def _rows_text(rows: list[Sequence[Any]]) -> bytes | None:
    """`rows` as the CSV lines the csv module writes of them (`formatted`), made in C a
    column at a time (an event chunk: 0.15 s of R1's 58k events through the csv module);
    None when the compiled formatter is off, or a column mixes kinds (or a text holds a
    carriage return): the csv module writes those."""
    if not rows or not fastcsv.available():
        return None
    return _columns_text(list(zip(*rows, strict=True)), len(rows))


def _columns_text(columns: Sequence[Sequence[Any]], n: int) -> bytes | None:
    """`_rows_text` of the `n` rows these columns make."""
    if not fastcsv.available():
        return None
    specs: list[tuple] = []
    for column in columns:
        kinds = set(map(type, column))
        if kinds == {int}:
            try:
                specs.append(("i", np.array(column, dtype=np.int64)))
            except OverflowError:  # beyond int64
                return None
        elif kinds == {float}:
            specs.append(("F", np.array(column, dtype=np.float64)))
        elif all(kind is type(None) or issubclass(kind, str) for kind in kinds):
            specs.append(("s", list(column)))  # (a StrEnum's cell is its value, as csv's)
        else:
            return None
    return fastcsv.format_csv(specs, n)


Run = tuple[str, str, Any]
"""A column of rows made by segments, as `kvsched._fastcore.format_runs` takes it: (how,
kind, values). How: "S" a value per row; "E" a value per segment, on each of its rows; "C"
a value per segment plus the row's place in it; "L" a value per segment on its last row, 0
on the others; "K" one value (0, 0.0 or None) on every row. Kind: "i" int64, "F" float64."""


def _expanded(runs: list[Run], counts: np.ndarray) -> list[Any]:
    """Runs as one column per row (what Arrow's writer takes), with numpy."""
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    out: list[Any] = []
    for how, kind, values in runs:
        if how == "S":
            out.append(values)
        elif how == "E":
            out.append(np.repeat(values, counts))
        elif how == "C":
            out.append(np.repeat(values, counts) + np.arange(total, dtype=np.int64)
                       - np.repeat(first, counts))
        elif how == "L":
            column = np.zeros(total, dtype=values.dtype)
            column[first + counts - 1] = values
            out.append(column)
        elif values is None:
            out.append([None] * total)
        else:
            out.append(np.full(total, values, dtype=np.float64 if kind == "F" else np.int64))
    return out


class StepCsv:
    """A `StepLog` sink writing `steps.csv` (full or compact) chunk by chunk.

    `replica`: a cluster replica's steps, with a last `replica` column holding it;
    `header=False` writes the rows only (one part of a cluster's file)."""

    def __init__(self, path: Path, mode: RecordMode, num_blocks: int,
                 replica: int | None = None, header: bool = True) -> None:
        self.mode = mode
        self.num_blocks = num_blocks
        self.replica = replica
        self.columns = STEP_COLUMNS if mode is RecordMode.FULL else COMPACT_COLUMNS
        self._names = (*self.columns, "replica") if replica is not None else self.columns
        self._handle: IO[bytes] = path.open("wb")
        self._header = header  # still to write
        # Arrow's writer, made at its first table (a compiled run's text never needs it,
        # nor pyarrow's import)
        self._pa: Any = None
        self._schema: Any = None
        self._writer: Any = None

    def _arrow(self) -> Any:
        if self._writer is None:
            # pyarrow (tens of ms to import): only the runs that use it pay
            import pyarrow as pa
            import pyarrow.csv as pacsv

            self._pa = pa
            self._schema = pa.schema([
                pa.field(name, pa.string() if name in _STEP_FLOATS else pa.int64())
                for name in self._names])
            options = pacsv.WriteOptions(include_header=self._header, quoting_style="none",
                                         quoting_header="none")
            self._writer = pacsv.CSVWriter(self._handle, self._schema, write_options=options)
            self._header = False
        return self._writer

    def _write_header(self) -> None:
        """The header line as Arrow writes it (names unquoted), for text written here."""
        if self._header:
            self._handle.write((",".join(self._names) + "\n").encode())
            self._header = False

    def __call__(self, chunk: list[Segment]) -> None:
        if self.mode is not RecordMode.FULL:
            compact = CompactRows(len(chunk), self.num_blocks)  # a row per segment: few
            compact.add(chunk)
            self.rows(compact)
            return
        part: list[Segment] = []
        rows = 0
        for segment in chunk:  # parts of about _ROWS steps: bounded scratch memory
            part.append(segment)
            rows += 1 if isinstance(segment, tuple) else segment.num_steps
            if rows >= _ROWS:
                self._write(self._full_columns(part))
                part, rows = [], 0
        if part:
            self._write(self._full_columns(part))

    @property
    def takes_rows(self) -> bool:
        """Whether a `StepLog` hands this file `CompactRows` (`rows`) rather than segments."""
        return self.mode is not RecordMode.FULL

    def rows(self, rows: CompactRows) -> None:
        """Compact rows, as the log made them (a row per segment)."""
        columns = rows.columns()
        text = self._text(columns) if self._writer is None else None
        if text is None:
            self._write(columns)
        else:  # (in C: no float text through Arrow, nor pyarrow's import)
            self._write_header()
            self._handle.write(text)

    def block(self, block: SegmentBlock) -> None:
        """Segments as columns (the compiled loop's): the same bytes as their rows and
        stretches through `__call__`, made a column at a time (in C: `format_csv`, or
        `format_runs` for a row per step, which repeats a stretch's values as it writes)."""
        if self.mode is RecordMode.FULL:
            runs, counts = self._block_runs(block)
            text = self._runs_text(runs, counts) if self._writer is None else None
            if text is None:
                self._write(_expanded(runs, counts))
                return
        else:
            columns = self._block_columns(block)
            text = self._text(columns) if self._writer is None else None
            if text is None:
                self._write(columns)
                return
        self._write_header()
        self._handle.write(text)

    def _text(self, columns: list[Any]) -> bytes | None:
        """The columns as CSV lines in C, or None when the compiled formatter is off."""
        if not fastcsv.available():
            return None
        n = len(columns[0])
        specs: list[tuple] = []
        for name, values in zip(self.columns, columns, strict=True):
            if type(values) is list and (not values or values[0] is None):
                specs.append(("s", values))  # mfu, mbu: [None, ...]
            elif name in _STEP_FLOATS:
                specs.append(("F", np.ascontiguousarray(values, dtype=np.float64)))
            else:
                specs.append(("i", np.ascontiguousarray(values, dtype=np.int64)))
        if self.replica is not None:
            specs.append(("i", np.full(n, self.replica, dtype=np.int64)))
        return fastcsv.format_csv(specs, n)

    def _runs_text(self, runs: list[Run], counts: np.ndarray) -> bytes | None:
        """Runs as CSV lines in C, or None when the compiled formatter is off."""
        if not fastcsv.available():
            return None
        specs = [(how, kind, cell_text(values).encode() if how == "K"
                  else np.ascontiguousarray(values)) for how, kind, values in runs]
        if self.replica is not None:
            specs.append(("K", "i", str(self.replica).encode()))
        return fastcsv.format_runs(specs, counts)

    def _block_runs(self, block: SegmentBlock) -> tuple[list[Run], np.ndarray]:
        """STEP_COLUMNS of `block`, a row per step, as runs over its segments (see `Run`):
        what `_full_columns` makes of the same segments. And the steps of each segment."""
        k = np.ascontiguousarray(block.column("num_steps"))
        is_row = block.column("is_row").astype(bool)
        last = np.cumsum(k) - 1  # each segment's last step
        free_steps = self.num_blocks - block.used  # a stretch's; an exact row keeps its own
        free_steps[last[is_row]] = block.column("row_free")[is_row]

        def each(name: str) -> Run:
            return ("E", "i", block.column(name))

        zero: Run = ("K", "i", 0)
        return [("C", "i", block.column("step")), ("S", "F", block.start),
                ("S", "F", block.duration), each("num_running"), each("num_waiting"),
                each("num_prefills"), each("prefill_tokens"), each("num_decodes"), zero,
                each("num_tokens"), ("S", "i", block.used), ("S", "i", free_steps), zero,
                each("num_admitted"), ("L", "i", block.column("num_finished")), zero, zero,
                ("K", "F", 0.0), zero, ("K", "F", None), ("K", "F", None), zero, zero], k

    def _block_columns(self, block: SegmentBlock) -> list[Any]:
        """`block` as COMPACT_COLUMNS: what `_compact_columns` makes of the same segments
        (a row per segment)."""
        n = len(block)
        k = block.column("num_steps")
        is_row = block.column("is_row").astype(bool)
        last = np.cumsum(k) - 1  # each segment's last step
        used_last = block.used[last]
        free = np.where(is_row, block.column("row_free"), self.num_blocks - used_last)
        zeros = np.zeros(n, dtype=np.int64)
        decodes, tokens = block.column("num_decodes") * k, block.column("num_tokens") * k
        return [block.column("step"), k, block.start[last - k + 1], block.duration_sum,
                block.column("num_running"), block.column("num_waiting"),
                block.column("num_prefills"), block.column("prefill_tokens"), decodes,
                zeros, tokens, used_last, free, zeros, block.column("num_admitted"),
                block.column("num_finished"), zeros, zeros, np.zeros(n), zeros,
                [None] * n, [None] * n, zeros, zeros]

    def _write(self, columns: list[Any]) -> None:
        writer = self._arrow()
        pa = self._pa
        arrays = []
        for name, values in zip(self.columns, columns, strict=True):
            if name not in _STEP_FLOATS:
                arrays.append(int64s(values))
            elif len(values) and values[0] is None:  # mfu, mbu without a hardware model
                arrays.append(_empty_texts(pa, len(values)))
            else:
                arrays.append(format_floats(values))
        if self.replica is not None:
            # (not pa.repeat: its scalar asks whether the value is a pandas object, which
            # imports pandas, a tenth of a second)
            arrays.append(int64s(np.full(len(arrays[0]), self.replica, dtype=np.int64)))
        writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        else:
            self._write_header()  # a run without steps: the header alone, as Arrow's
        self._handle.close()

    def _full_columns(self, chunk: list[Segment]) -> list[Any]:
        """One column per STEP_COLUMNS name, a row per step, built with numpy: what a
        stretch holds constant is repeated segment by segment; what changes per step (times,
        blocks, utilisation) is chained from the stretches' lists."""
        rows = [segment for segment in chunk if isinstance(segment, tuple)]
        stretches = cast(list[Stretch], [s for s in chunk if not isinstance(s, tuple)])
        is_row = np.fromiter((isinstance(segment, tuple) for segment in chunk), dtype=bool,
                             count=len(chunk))
        counts = np.ones(len(chunk), dtype=np.int64)
        counts[~is_row] = [s.num_steps for s in stretches]
        total = int(counts.sum())
        starts = np.cumsum(counts) - counts
        row_columns = list(zip(*rows, strict=True)) if rows else [()] * len(STEP_COLUMNS)
        stretch_of = np.flatnonzero(~is_row)

        def per_segment(index: int, stretch_values: Any, dtype: Any = np.int64) -> np.ndarray:
            values = np.empty(len(chunk), dtype=dtype)
            values[is_row] = row_columns[index]
            values[stretch_of] = stretch_values
            return values

        cols: list[Any] = [None] * len(STEP_COLUMNS)
        offsets = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        cols[0] = np.repeat(per_segment(0, [s.step for s in stretches]), counts) + offsets
        decodes = [s.num_decodes for s in stretches]
        varying = {3: [s.num_running for s in stretches], 4: [s.num_waiting for s in stretches],
                   7: decodes, 9: decodes}
        for index in _CONSTANT:
            if index == 17:  # thrash_ratio: 0.0 throughout a stretch
                cols[index] = np.repeat(per_segment(index, 0.0, np.float64), counts)
            else:
                cols[index] = np.repeat(per_segment(index, varying.get(index, 0)), counts)
        last = np.zeros(total, dtype=np.int64)
        last[starts + counts - 1] = per_segment(14, [s.num_finished for s in stretches])
        cols[14] = last

        def chained(index: int, attribute: str, dtype: Any) -> np.ndarray:
            lists = [(segment[index],) if isinstance(segment, tuple)
                     else getattr(segment, attribute) for segment in chunk]
            return np.fromiter(chain.from_iterable(lists), dtype=dtype, count=total)

        cols[1] = chained(1, "starts", np.float64)
        cols[2] = chained(2, "durations", np.float64)
        cols[10] = chained(10, "blocks_used", np.int64)
        cols[11] = self.num_blocks - cols[10]  # a stretch's; an exact row keeps its own
        cols[11][starts[is_row]] = row_columns[11]
        for index, attribute in ((19, "mfu"), (20, "mbu")):
            first = chunk[0]
            if (first[index] if isinstance(first, tuple) else getattr(first, attribute)) is None:
                cols[index] = [None] * total  # one time model per run: all steps or none
            else:
                cols[index] = chained(index, attribute, np.float64)
        for index, attribute in ((21, "cached_blocks"), (22, "evicted_blocks")):
            lists = [(segment[index],) if isinstance(segment, tuple)
                     else getattr(segment, attribute)
                     or repeat(0, segment.num_steps)
                     for segment in chunk]
            cols[index] = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=total)
        return cols
