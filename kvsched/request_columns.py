"""A workload of plain requests held as columns, each `Request` made only when read.

A list of ten million `Request` objects takes about 3 GB; their four numbers take 200 MB as
arrays. Synthetic workloads without shared prompts or sessions, and clean traces, are built
this way; the loops read them one request at a time (`kvsched.turns.ArrivalQueue`), and the
records read their columns (`kvsched.records.table`). Anything else is a plain list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from kvsched.request import MAX_LEN, MAX_TIME, Request


def same_items(self: Sequence, other: object) -> bool:
    """`==` for a sequence held as columns: equal to any sequence of equal items."""
    if not isinstance(other, Sequence):
        return NotImplemented
    return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))


class RequestColumns(Sequence[Request]):
    """Requests `r0, r1, ...` (or `r{id_numbers[i]}`) with no prefix, session or turn.

    `class_codes[i]` indexes `class_names` (-1: no class)."""

    __slots__ = ("arrival_time", "prompt_len", "output_len", "priority", "class_codes",
                 "class_names", "id_numbers")

    def __init__(self, arrival_time: np.ndarray, prompt_len: np.ndarray,
                 output_len: np.ndarray, priority: np.ndarray | None = None,
                 class_codes: np.ndarray | None = None,
                 class_names: Sequence[str] = (), id_numbers: np.ndarray | None = None) -> None:
        n = len(arrival_time)
        self.arrival_time = np.ascontiguousarray(arrival_time, dtype=np.float64)
        self.prompt_len = _compact_ints(prompt_len)
        self.output_len = _compact_ints(output_len)
        self.priority = _compact_ints(np.zeros(n, dtype=np.int64) if priority is None
                                      else priority)
        self.class_codes = (np.broadcast_to(np.int16(-1), (n,)) if class_codes is None
                            else np.asarray(class_codes, dtype=np.int16))
        self.class_names = tuple(class_names)
        self.id_numbers = None if id_numbers is None else _compact_ints(id_numbers)
        self._check()

    def _check(self) -> None:
        """What `Request` itself refuses, found for the whole table at once."""
        for bad in (np.flatnonzero(self.prompt_len < 1), np.flatnonzero(self.output_len < 1),
                    np.flatnonzero(~((self.arrival_time >= 0) & (self.arrival_time <= MAX_TIME))),
                    np.flatnonzero(np.maximum(self.prompt_len, self.output_len) > MAX_LEN)):
            if bad.size:
                self[int(bad[0])]  # raises Request's own message
                raise AssertionError("unreachable")  # pragma: no cover

    def __len__(self) -> int:
        return len(self.arrival_time)

    @overload
    def __getitem__(self, i: int) -> Request: ...

    @overload
    def __getitem__(self, i: slice) -> list[Request]: ...

    def __getitem__(self, i: int | slice) -> Request | list[Request]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        code = int(self.class_codes[i])
        return Request(self.request_id(i), float(self.arrival_time[i]),
                       int(self.prompt_len[i]), int(self.output_len[i]),
                       int(self.priority[i]), self.class_names[code] if code >= 0 else None)

    def __iter__(self) -> Iterator[Request]:
        for i in range(len(self)):
            yield self[i]

    __eq__ = same_items  # a list of the same requests is equal
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RequestColumns({len(self)} requests)"

    def request_id(self, i: int) -> str:
        return f"r{i}" if self.id_numbers is None else f"r{self.id_numbers[i]}"

    def class_name(self, i: int) -> str | None:
        code = int(self.class_codes[i])
        return self.class_names[code] if code >= 0 else None


def _compact_ints(values: Any) -> np.ndarray:
    """int32 when every value fits (half the memory of int64), else int64; one value
    everywhere (a synthetic workload's priority) takes no memory at all."""
    array = np.asarray(values, dtype=np.int64)
    if not array.size:
        return array.astype(np.int32)
    low, high = int(array.min()), int(array.max())
    dtype = np.int32 if low >= -2**31 and high < 2**31 else np.int64
    if low == high:
        return np.broadcast_to(dtype(low), array.shape)
    return array.astype(dtype)
