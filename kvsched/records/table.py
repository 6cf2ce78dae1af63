"""A run's request records as columns: row i is input request i.

A `RequestRecord` object costs about 450 bytes, its numbers as arrays about 60: ten million
requests' records fit in memory only this way. The table reads as a sequence of
`RequestRecord` (each made when read), and hands its columns to what reduces them
(`kvsched.records.metrics`) and its rows to the CSV writer without making records at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from kvsched.records import fastcsv
from kvsched.records.rows import RequestRecord
from kvsched.request import Request, Status
from kvsched.request_columns import RequestColumns, same_items
from kvsched.sequence import Seq

STATUSES = (Status.FINISHED.value, Status.STARVED.value, Status.UNFINISHED.value,
            Status.REJECTED.value)
STATUS_CODE = {name: code for code, name in enumerate(STATUSES)}
_ROWS = 1 << 16  # rows turned into Python values at a time


class RecordTable(Sequence[RequestRecord]):
    """The records of `workload`'s requests, filled by `put` as each one ends."""

    __slots__ = ("workload", "arrival_time", "status", "first_scheduled_time",
                 "first_token_time", "finish_time", "ttft_steps", "num_preemptions",
                 "num_recomputed_tokens", "num_swapped_blocks", "max_token_gap",
                 "generated_tokens", "prefix_hit_tokens", "cached_tokens", "reasons",
                 "_own_arrivals", "_workload_columns")

    def __init__(self, workload: Sequence[Request]) -> None:
        n = len(workload)
        self.workload = workload
        # Plain columns arrive when they say; a list may hold turns, which arrive later.
        self._own_arrivals = not isinstance(workload, RequestColumns)
        self.arrival_time = (np.full(n, np.nan) if self._own_arrivals
                             else workload.arrival_time)  # type: ignore[attr-defined]
        self.status = np.full(n, 255, dtype=np.uint8)
        self.first_scheduled_time = np.full(n, np.nan)
        self.first_token_time = np.full(n, np.nan)
        self.finish_time = np.full(n, np.nan)
        self.max_token_gap = np.full(n, np.nan)
        self.ttft_steps = np.full(n, -1, dtype=np.int64)  # -1: none
        self.generated_tokens = np.zeros(n, dtype=np.int32)
        self.prefix_hit_tokens = np.full(n, -1, dtype=np.int32)  # -1: never admitted
        # Counts that most runs leave at 0 everywhere: a column is made at its first value.
        zeros = np.broadcast_to(np.int64(0), (n,))
        self.num_preemptions = self.num_recomputed_tokens = self.num_swapped_blocks = \
            self.cached_tokens = zeros
        self.reasons: dict[int, str] = {}
        self._workload_columns: tuple | None = None  # a list's, read once

    def put(self, i: int, seq: Seq, status: str, generated: int, scheduled: float | None,
            first_token: float | None, ttft_steps: int | None, finish: float | None,
            gap: float | None, hit: int | None, counted: bool) -> None:
        """Row `i` from the request's run state as it ended: the common values read from
        `seq` by the caller (`kvsched.cluster.loop.put_record`, compiled: it reads a `Seq`
        in C, where each attribute read from here cost about 350 instructions), the rare
        ones (`counted`: a count or a reason to keep) from `seq` here."""
        if self._own_arrivals:
            self.arrival_time[i] = seq.request.arrival_time
        self.status[i] = STATUS_CODE[status]
        if scheduled is not None:
            self.first_scheduled_time[i] = scheduled
        if first_token is not None:
            self.first_token_time[i] = first_token
        if ttft_steps is not None:
            self.ttft_steps[i] = ttft_steps
        if finish is not None:
            self.finish_time[i] = finish
        if gap is not None:
            self.max_token_gap[i] = gap
        self.generated_tokens[i] = generated
        if hit is not None:
            self.prefix_hit_tokens[i] = hit
        if counted:
            self._put_counts(i, seq)

    def _put_counts(self, i: int, seq: Seq) -> None:
        """The rare values: `put_record`'s `counted` says whether any is there, so a field
        added here is added to that test too (tests/test_record_table.py sets each alone)."""
        if seq.num_preemptions:
            self._count("num_preemptions")[i] = seq.num_preemptions
        if seq.num_recomputed_tokens:
            self._count("num_recomputed_tokens")[i] = seq.num_recomputed_tokens
        if seq.num_swapped_blocks:
            self._count("num_swapped_blocks")[i] = seq.num_swapped_blocks
        if seq.cached_tokens:
            self._count("cached_tokens")[i] = seq.cached_tokens
        if seq.end_reason is not None:
            self.reasons[i] = seq.end_reason

    def _count(self, name: str) -> np.ndarray:
        column = getattr(self, name)
        if not column.flags.writeable:  # still the shared zeros
            column = np.zeros(len(column), dtype=np.int64)
            setattr(self, name, column)
        return column

    # -- as a sequence of records ------------------------------------------------------

    def __len__(self) -> int:
        return len(self.status)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[RequestRecord]: ...

    def __getitem__(self, i: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("record index out of range")
        return self.take([i])[0]

    def __iter__(self) -> Iterator[RequestRecord]:
        for row in self.rows():
            yield RequestRecord(*row)

    __eq__ = same_items  # a list of the same records is equal
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordTable({len(self)} requests)"

    # -- as columns --------------------------------------------------------------------

    def columns(self, rows: slice | np.ndarray | None = None) -> Columns:
        """Columns of `rows` (a slice or indices; all by default), derived times
        included; NaN or -1 for none. Made on each call: a long run's derived columns are
        not kept beside the table."""
        if rows is None:
            rows = slice(None)
        work = self.workload
        source: tuple
        if isinstance(work, RequestColumns):
            source = work.prompt_len, work.output_len, work.priority, work.class_codes
            names = work.class_names
        else:  # a list's columns, read once (a tenth of what its requests take)
            if self._workload_columns is None:
                self._workload_columns = _list_columns(work)
            source, names = self._workload_columns[:4], self._workload_columns[4]
        prompt, output, priority, codes = (column[rows] for column in source)
        arrival = self.arrival_time[rows]
        first_token, finish = self.first_token_time[rows], self.finish_time[rows]
        ttft = first_token - arrival
        e2e = finish - arrival
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
        return Columns(
            arrival_time=arrival, prompt_len=prompt, output_len=output, priority=priority,
            class_codes=codes, class_names=names, status=self.status[rows],
            first_scheduled_time=self.first_scheduled_time[rows],
            first_token_time=first_token, finish_time=finish, ttft=ttft,
            ttft_steps=self.ttft_steps[rows], e2e_latency=e2e,
            queue_time=self.first_scheduled_time[rows] - arrival,
            num_preemptions=self.num_preemptions[rows],
            num_recomputed_tokens=self.num_recomputed_tokens[rows],
            num_swapped_blocks=self.num_swapped_blocks[rows],
            max_token_gap=self.max_token_gap[rows],
            generated_tokens=self.generated_tokens[rows], tpot=tpot,
            prefix_hit_tokens=self.prefix_hit_tokens[rows],
            cached_tokens=self.cached_tokens[rows])

    def rows(self, start: int = 0, stop: int | None = None,
             extra: Sequence[tuple] = ()) -> Iterator[tuple]:
        """RequestRecord.as_row() of rows start..stop, made a chunk at a time (`extra`:
        columns after those, see `_cells`)."""
        stop = len(self) if stop is None else stop
        for lo in range(start, stop, _ROWS):
            yield from self._tuples(np.arange(lo, min(lo + _ROWS, stop)), extra)

    def csv_text(self, start: int, stop: int, extra: Sequence[tuple] = ()) -> bytes | None:
        """Rows start..stop as the CSV lines `rows()` gives the csv module (None when the
        compiled formatter is not built, or a text needs the csv module)."""
        if not fastcsv.available():
            return None
        return fastcsv.format_csv(self._cells(np.arange(start, stop), extra), stop - start)

    def _cells(self, index: np.ndarray, extra: Sequence[tuple] = ()) -> list[tuple]:
        """REQUEST_COLUMNS of rows `index` as typed columns, (kind, values[, names]), the
        kinds of `kvsched.fastcore.format_csv`: what both the CSV text and the rows'
        Python values are made from. `extra`: more columns so typed, a value per row of the
        table (a cluster's `replica`), appended."""
        c = self.columns(index)
        work = self.workload
        if isinstance(work, RequestColumns):
            numbers = index if work.id_numbers is None else work.id_numbers[index]
            ids: tuple = ("r", np.ascontiguousarray(numbers, dtype=np.int64))
        else:
            ids = ("s", self.request_ids(index.tolist()))
        reasons = self.reasons
        why = [reasons.get(i) for i in index.tolist()] if reasons else [None] * len(index)

        def ints(kind: str, values: np.ndarray) -> tuple:
            return kind, np.ascontiguousarray(values, dtype=np.int64)

        def floats(kind: str, values: np.ndarray) -> tuple:
            return kind, np.ascontiguousarray(values, dtype=np.float64)

        return [
            ids, floats("F", c.arrival_time), ints("i", c.prompt_len), ints("i", c.output_len),
            ints("i", c.priority), (*ints("k", c.class_codes), tuple(c.class_names)),
            (*ints("k", c.status), STATUSES), floats("f", c.first_scheduled_time),
            floats("f", c.first_token_time), floats("f", c.finish_time), floats("f", c.ttft),
            ints("I", c.ttft_steps), floats("f", c.e2e_latency), floats("f", c.queue_time),
            ints("i", c.num_preemptions), ints("i", c.num_recomputed_tokens),
            ints("i", c.num_swapped_blocks), floats("f", c.max_token_gap),
            ints("i", c.generated_tokens), ("s", why), floats("f", c.tpot),
            ints("I", c.prefix_hit_tokens), ints("i", c.cached_tokens),
            *((kind, values[index], *rest) for kind, values, *rest in extra)]

    def take(self, indices: Iterable[int] | np.ndarray) -> list[RequestRecord]:
        """The records of rows `indices`, in that order."""
        index = np.fromiter(indices, dtype=np.int64) if not isinstance(indices, np.ndarray) \
            else indices.astype(np.int64)
        out: list[RequestRecord] = []
        for lo in range(0, len(index), _ROWS):
            out.extend(RequestRecord(*row) for row in self._tuples(index[lo:lo + _ROWS]))
        return out

    def request_ids(self, indices: Iterable[int]) -> list[str]:
        work = self.workload
        if isinstance(work, RequestColumns):
            return [work.request_id(i) for i in indices]
        return [work[i].request_id for i in indices]

    def _tuples(self, index: np.ndarray, extra: Sequence[tuple] = ()) -> Iterator[tuple]:
        return zip(*map(_python, self._cells(index, extra)), strict=True)


class RecordSubset(Sequence[RequestRecord]):
    """Rows `rows` (ascending) of a table, as a sequence of records (each made when read)
    that reduces as columns (`columns_of`) without making them: a cluster replica's
    requests, summarized apart (made into records first, R5's four replicas' summaries
    took 0.2 s)."""

    __slots__ = ("table", "rows")

    def __init__(self, table: RecordTable, rows: np.ndarray) -> None:
        self.table = table
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[RequestRecord]: ...

    def __getitem__(self, i: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(i, slice):
            return self.table.take(self.rows[i])
        return self.table.take([int(self.rows[i])])[0]

    def __iter__(self) -> Iterator[RequestRecord]:
        for lo in range(0, len(self.rows), _ROWS):
            for row in self.table._tuples(self.rows[lo:lo + _ROWS]):
                yield RequestRecord(*row)

    __eq__ = same_items  # a list of the same records is equal
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordSubset({len(self)} of {len(self.table)} requests)"

    def columns(self) -> Columns:
        return self.table.columns(self.rows)


@dataclass(frozen=True, slots=True, eq=False)  # (arrays: == and hash would fail)
class Columns:
    """Request records as arrays, named as REQUEST_COLUMNS (`class_codes` index
    `class_names`, -1: none; `status` indexes STATUSES; NaN or -1: no value)."""

    arrival_time: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    priority: np.ndarray
    class_codes: np.ndarray
    class_names: tuple[str, ...]
    status: np.ndarray
    first_scheduled_time: np.ndarray
    first_token_time: np.ndarray
    finish_time: np.ndarray
    ttft: np.ndarray
    ttft_steps: np.ndarray
    e2e_latency: np.ndarray
    queue_time: np.ndarray
    num_preemptions: np.ndarray
    num_recomputed_tokens: np.ndarray
    num_swapped_blocks: np.ndarray
    max_token_gap: np.ndarray
    generated_tokens: np.ndarray
    tpot: np.ndarray
    prefix_hit_tokens: np.ndarray
    cached_tokens: np.ndarray


def columns_of(records: Sequence[RequestRecord]) -> Columns:
    """The columns of a table, or of a list of records (a cluster's, a test's)."""
    if isinstance(records, RecordTable | RecordSubset):
        return records.columns()
    n = len(records)

    def floats(name: str) -> np.ndarray:
        return np.fromiter((_nan(getattr(r, name)) for r in records), np.float64, n)

    def ints(name: str, none: int = -1) -> np.ndarray:
        return np.fromiter((none if (v := getattr(r, name)) is None else v for r in records),
                           np.int64, n)

    names = tuple(sorted({r.class_name for r in records if r.class_name is not None}))
    index = {name: k for k, name in enumerate(names)}
    return Columns(
        arrival_time=floats("arrival_time"), prompt_len=ints("prompt_len"),
        output_len=ints("output_len"), priority=ints("priority"),
        class_codes=np.fromiter((index.get(r.class_name, -1)  # type: ignore[arg-type]
                                 for r in records), np.int16, n),
        class_names=names,
        status=np.fromiter((STATUS_CODE[r.status] for r in records), np.uint8, n),
        first_scheduled_time=floats("first_scheduled_time"),
        first_token_time=floats("first_token_time"), finish_time=floats("finish_time"),
        ttft=floats("ttft"), ttft_steps=ints("ttft_steps"), e2e_latency=floats("e2e_latency"),
        queue_time=floats("queue_time"), num_preemptions=ints("num_preemptions"),
        num_recomputed_tokens=ints("num_recomputed_tokens"),
        num_swapped_blocks=ints("num_swapped_blocks"), max_token_gap=floats("max_token_gap"),
        generated_tokens=ints("generated_tokens"), tpot=floats("tpot"),
        prefix_hit_tokens=ints("prefix_hit_tokens"), cached_tokens=ints("cached_tokens"))


def take(records: Sequence[RequestRecord], indices: Sequence[int] | np.ndarray
         ) -> list[RequestRecord]:
    """The records at `indices` of a table or a list."""
    if isinstance(records, RecordTable):
        return records.take(indices)
    return [records[i] for i in np.asarray(indices, dtype=np.int64).tolist()]


def index_of(records: Sequence[RequestRecord], request_ids: Iterable[str]) -> dict[str, int]:
    """Row of each of `request_ids` found in the records."""
    wanted = set(request_ids)
    found: dict[str, int] = {}
    if not wanted:
        return found
    n = len(records)
    for lo in range(0, n, _ROWS):
        rows = range(lo, min(lo + _ROWS, n))
        ids = (records.request_ids(rows) if isinstance(records, RecordTable)
               else [records[i].request_id for i in rows])
        for i, request_id in zip(rows, ids, strict=True):
            if request_id in wanted:
                found[request_id] = i
    return found


def reasons_of(records: Sequence[RequestRecord], indices: Iterable[int]) -> list[str | None]:
    if isinstance(records, RecordTable):
        return [records.reasons.get(i) for i in indices]
    return [records[i].reason for i in indices]


def rows_of(records: Sequence[RequestRecord]) -> Iterable[tuple]:
    """REQUEST_COLUMNS rows of records, without making records from a table (a table's can
    also be had as CSV text: `TableRows.csv_text`)."""
    if isinstance(records, RecordTable):
        return TableRows(records)
    return (r.as_row() for r in records)


class TableRows:
    """A table's rows: tuples when iterated; `csv_text` gives them as CSV lines, a chunk
    at a time, for `kvsched.records.csvout.write_rows`. `extra`: columns after
    REQUEST_COLUMNS, typed as `RecordTable._cells` makes them (a value per row)."""

    __slots__ = ("table", "extra")

    def __init__(self, table: RecordTable, extra: Sequence[tuple] = ()) -> None:
        self.table = table
        self.extra = extra

    def __iter__(self) -> Iterator[tuple]:
        return self.table.rows(extra=self.extra)

    def csv_text(self) -> Iterator[bytes | Iterator[tuple]]:
        """Each chunk of rows as CSV lines, or as tuples where those need the csv module."""
        table = self.table
        n = len(table)
        for lo in range(0, n, _ROWS):
            hi = min(lo + _ROWS, n)
            text = table.csv_text(lo, hi, self.extra)
            yield text if text is not None else table.rows(lo, hi, self.extra)


def _list_columns(work: Sequence[Request]) -> tuple:
    """prompt_len, output_len, priority, class codes and class names of a list."""
    n = len(work)
    names = tuple(sorted({r.class_name for r in work if r.class_name is not None}))
    index = {name: k for k, name in enumerate(names)}
    return (np.fromiter((r.prompt_len for r in work), np.int64, n),
            np.fromiter((r.output_len for r in work), np.int64, n),
            np.fromiter((r.priority for r in work), np.int64, n),
            np.fromiter((index.get(r.class_name, -1)  # type: ignore[arg-type]
                         for r in work), np.int16, n), names)


def _nan(value: Any) -> float:
    return np.nan if value is None else value


def _python(cell: tuple) -> list:
    """A typed column of `RecordTable._cells` as the Python values of RequestRecord."""
    kind, values = cell[0], cell[1]
    if kind == "s":
        return values
    if kind == "r":
        return [f"r{v}" for v in values.tolist()]
    if kind == "k":
        names = cell[2]
        return [names[k] if k >= 0 else None for k in values.tolist()]
    if kind == "f":
        return _floats(values)
    if kind == "I":
        return _ints(values)
    return values.tolist()  # "i", "F"


def _floats(column: np.ndarray) -> list[float | None]:
    return [None if v != v else v for v in column.tolist()]


def _ints(column: np.ndarray) -> list[int | None]:
    return [None if v < 0 else v for v in column.tolist()]
