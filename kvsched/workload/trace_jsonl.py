"""Clean JSON-lines traces read without pandas: by Python's json, when the file is plainly in
the part of JSON where it and pandas' `read_json(lines=True, dtype=False)` (ujson) read the
same values.

Importing pandas costs about a fifth of a second, as much as reading and replaying a quarter
of the Mooncake trace. The file is joined into one JSON list exactly as pandas joins it (its
lines stripped, the blank ones dropped) and read here only when it is plainly clean:
- UTF-8 text without a backslash: no escape, so every string and key reads the same both
  ways (ujson drops a lone surrogate `\\ud800` that Python keeps: two keys could merge);
- a list of objects, each with every needed key, none of the `absent` keys anywhere in the
  text (a key is spelt as it is, with no escape);
- no duplicate key and no `:` inside a string (`:` counted against the objects' entries):
  a value a duplicate key hides is still read by ujson, which refuses some numbers;
- every number ujson reads too: whole numbers from -2**63 to 2**64 - 1, and floats whose
  whole part has at most 18 digits (ujson refuses a float whose whole part overflows 64
  bits; it rounds some digits differently, so a needed column takes whole numbers only);
- every needed number a whole number (not a bool) within the column's bounds.
Anything else returns None and the caller reads the file with pandas, which names the first
bad line. So does a file Python's json refuses where ujson may not (a trailing comma, `01`,
a raw control character in a string, nesting past ~990 levels where ujson stops at 1024).
`tests/test_trace_jsonl.py` holds both readers to the same columns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

Columns = tuple[dict[str, np.ndarray], dict[str, list]]
"""The needed number columns as float arrays, and each list column's cells as read."""

_INT_RANGE = (-2 ** 63, 2 ** 64 - 1)  # the whole numbers ujson reads
_MAX_WHOLE_DIGITS = 18  # a float's whole part that ujson surely reads


class _NotClean(Exception):
    """A float ujson might refuse (raised from inside json's parsing)."""


def read_clean_lines(path: Path, needed: dict[str, tuple[float, float]], cells: list[str],
                     absent: list[str]) -> Columns | None:
    """The `needed` number columns (name -> inclusive bounds) of a clean JSON-lines trace,
    and the values of those of its `cells` keys that it has (in every row then; each value as
    read: the caller must refuse any number outside 0..2**56, which ujson might not read), or
    None. `absent`: keys the file must not have (their reading needs pandas)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # pandas' reading names the problem
    if "\\" in text or any(f'"{name}"' in text for name in absent):
        return None
    cells = [name for name in cells if f'"{name}"' in text]
    # (pandas' `JsonReader._combine_lines`, on the text split at "\n" as it splits it)
    lines = (line.strip() for line in text.split("\n"))
    joined = "[" + ",".join([line for line in lines if line]) + "]"
    try:
        rows = json.loads(joined, parse_float=_float)
        number_columns = {name: [row[name] for row in rows] for name in needed}
        cell_columns = {name: [row[name] for row in rows] for name in cells}
    except (ValueError, RecursionError, _NotClean, KeyError, TypeError):
        return None
    if not rows or not _plain_entries(rows, text.count(":"), len({*needed, *cells})):
        return None
    out: dict[str, np.ndarray] = {}
    for name, (low, high) in needed.items():
        column = number_columns[name]
        if set(map(type, column)) != {int}:
            return None
        try:
            values = np.array(column, dtype=np.int64).astype(float)
        except OverflowError:
            return None
        if not (values.min() >= low and values.max() <= high):
            return None
        out[name] = values
    return out, cell_columns


def _float(literal: str) -> float:
    """json's `parse_float`: a float ujson reads too, as Python reads it."""
    whole = literal.lstrip("-").partition(".")[0].partition("e")[0].partition("E")[0]
    if len(whole) > _MAX_WHOLE_DIGITS:
        raise _NotClean
    return float(literal)


def _plain_entries(rows: list, colons: int, read: int) -> bool:
    """Whether the rows' values outside the keys read hold only numbers ujson reads, and the
    objects hold as many entries as the text has colons (no duplicate key, no `:` in a
    string). A row with only the keys read has nothing else to look at: its values are
    checked by the caller."""
    entries = 0
    try:
        for row in rows:
            entries += len(row)
            if len(row) > read:
                entries += _nested_entries(list(row.values()))
    except (_NotClean, RecursionError):
        return False
    return entries == colons


def _nested_entries(values: list) -> int:
    """The entries of the objects within `values`; raises _NotClean at a whole number
    ujson refuses."""
    count = 0
    for value in values:
        kind = type(value)
        if kind is int:
            if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
                raise _NotClean
        elif kind is list:
            count += _nested_entries(value)
        elif kind is dict:
            count += len(value) + _nested_entries(list(value.values()))
    return count
