"""Clean CSV traces read without pandas: by the C reader when the file is in its strict
subset of CSV, else by pyarrow.

Importing pandas costs about a quarter of a second, a third of what a whole run of the
Azure hour may take. A trace is read here only when it is plainly clean: a `.csv` file
whose needed columns are all there, uniquely named, whole numbers (int64) or zone-less
timestamps, with no empty cell, no value out of range, and none of the layout's optional
columns. Anything else returns None and the caller reads the file with pandas, which names
the first bad row. For clean files all three readers give the same numbers, bit for bit
(see `arrival_seconds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvsched.records import fastcsv

NS_PER_S = 10 ** 9


def read_clean_columns(path: Path, needed: dict[str, str], absent: list[str],
                       limits: dict[str, tuple[float, float]]) -> dict[str, np.ndarray] | None:
    """The `needed` columns of a clean trace as float arrays (`needed` maps a column to
    "number" or "datetime"; datetimes as seconds since the earliest), or None.

    `absent`: columns the file must not have (their values would need pandas' reading);
    `limits`: inclusive bounds of the number columns."""
    if path.suffix.lower() != ".csv":
        return None
    read = _compiled_read(path, needed)
    if read is None:
        read = _arrow_read(path, needed)
    if read is None:
        return None
    names, ints = read
    if (len(set(names)) != len(names) or any(name in names for name in absent)
            or any(name not in names for name in needed)):
        return None
    out: dict[str, np.ndarray] = {}
    for name, kind in needed.items():
        if kind == "datetime":
            seconds = arrival_seconds(ints[name])
            if seconds is None:
                return None
            out[name] = seconds
            continue
        values = ints[name].astype(float)
        low, high = limits[name]
        if len(values) and not (values.min() >= low and values.max() <= high):
            return None
        out[name] = values
    return out


Read = tuple[list[str], dict[str, np.ndarray]]
"""A trace's column names, and its needed columns as int64: numbers as they are, time
stamps in nanoseconds."""


def _compiled_read(path: Path, needed: dict[str, str]) -> Read | None:
    """The C reader's (kvsched/_fastcore.c `read_csv`), for files in its strict subset of
    what pyarrow reads, to the same integers; it saves importing pyarrow (about 40 ms of a
    run that takes half a second). None when it is not built or the file is outside it."""
    if not fastcsv.available():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None  # pandas' reading names the problem
    wanted = tuple(needed)
    columns = fastcsv.read_csv(data, wanted, "".join(
        "t" if kind == "datetime" else "n" for kind in needed.values()))
    if columns is None:
        return None
    header = data[:data.index(b"\n")].removesuffix(b"\r").decode("ascii")
    return header.split(","), {name: np.frombuffer(column, dtype=np.int64)
                               for name, column in zip(wanted, columns, strict=True)}


def _arrow_read(path: Path, needed: dict[str, str]) -> Read | None:
    """pyarrow's reading, when every needed column came out null-free and of its kind:
    int64 numbers, zone-less time stamps."""
    # pyarrow (tens of ms to import): only the runs that use it pay
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        table = pacsv.read_csv(path)
    except Exception:  # noqa: BLE001 - any doubt: pandas reads it and names the problem
        return None
    names = table.column_names
    if not table.num_rows or any(name not in names or names.count(name) > 1
                                 for name in needed):
        return None
    ints: dict[str, np.ndarray] = {}
    for name, kind in needed.items():
        column: Any = table.column(name)
        if column.null_count:
            return None
        if kind == "datetime":
            if not (pa.types.is_timestamp(column.type) and column.type.tz is None):
                return None
            ints[name] = _nanoseconds(pa, column)
        elif pa.types.is_int64(column.type):
            ints[name] = _int64s(column)
        else:
            return None
    return names, ints


def _int64s(column: Any) -> np.ndarray:
    """A null-free int64 column as numpy, from its buffers (pyarrow's `to_numpy` would
    import pandas)."""
    parts = [np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=len(chunk),
                           offset=chunk.offset * 8) for chunk in column.chunks]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _nanoseconds(pa: Any, column: Any) -> np.ndarray:
    """A null-free timestamp column as int64 nanoseconds: its buffers as they are when
    they hold nanoseconds (the reader's unit for ISO stamps), else Arrow's cast (which
    loads pyarrow.compute, a tenth of a second)."""
    if column.type.unit != "ns":
        column = column.cast(pa.timestamp("ns"))
    return _int64s(column)


def arrival_seconds(stamps_ns: np.ndarray) -> np.ndarray | None:
    """Seconds since the earliest stamp, as pandas' `(s - s.min()).dt.total_seconds()`
    computes them: whole seconds plus the rest divided by the ticks per second, each
    rounded once (the same float at any tick unit). None past 2**53 ns (about 104 days),
    where pandas nudges some values: that reading stays with pandas."""
    delta = stamps_ns - stamps_ns.min()
    if len(delta) and delta.max() > 2 ** 53:
        return None
    whole, rest = np.divmod(delta, NS_PER_S)
    return whole + rest / NS_PER_S
