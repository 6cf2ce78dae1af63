"""CSV text made and read in C (`kvsched/_fastcore.c`), when the extension is built: the
record writers' lines (`format_csv`, `format_runs`) and the clean traces' columns
(`read_csv`). Free of kvsched imports, so that every writer and reader can take it, and
the compiled loop (`kvsched.fastcore`) too.

`KVSCHED_CORE=python` in the environment turns the C code off (to compare, or to profile).
"""

from __future__ import annotations

import os

import numpy as np

try:
    from kvsched import _fastcore
except ImportError:  # not built (no compiler when installed): the Python loop runs everything
    _fastcore = None


def available() -> bool:
    """Whether the C extension is built and not turned off."""
    return _fastcore is not None and os.environ.get("KVSCHED_CORE", "") != "python"


def format_csv(columns: list[tuple], n: int) -> bytes | None:
    """`n` CSV lines of typed columns (see `_fastcore.format_csv`), None if a text needs the
    csv module."""
    assert _fastcore is not None
    out: bytes | None = _fastcore.format_csv(columns, n)
    return out


def format_runs(columns: list[tuple], counts: np.ndarray) -> bytes:
    """CSV lines of rows made by segments (see `kvsched.records.csvout.Run`)."""
    assert _fastcore is not None
    out: bytes = _fastcore.format_runs(columns, counts)
    return out


def read_csv(data: bytes, wanted: tuple[str, ...], kinds: str) -> tuple[bytes, ...] | None:
    """The `wanted` columns of CSV text as int64 buffers (kind 'n': integers, 't': time
    stamps in nanoseconds), None unless the text is plainly clean (see `_fastcore.read_csv`
    for the subset of CSV it takes)."""
    assert _fastcore is not None
    out: tuple[bytes, ...] | None = _fastcore.read_csv(data, wanted, kinds)
    return out
