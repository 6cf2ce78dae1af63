"""Arrow arrays made from numpy buffers.

pyarrow's `pa.array` asks whether its input is a pandas object, which imports pandas (about
a quarter of a second, a third of a short run) the first time; the writers never pass
pandas objects, so they build their arrays from buffers instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def int64s(values: Any) -> Any:
    """`values` (numbers or a numpy array) as a null-free pyarrow int64 array."""
    # pyarrow (tens of ms to import): only the runs that use it pay
    import pyarrow as pa

    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def texts(values: list[str]) -> Any:
    """Python strings as a null-free pyarrow string array."""
    # pyarrow (tens of ms to import): only the runs that use it pay
    import pyarrow as pa

    encoded = [value.encode() for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
                                 ).cast(pa.string())


def mask(values: np.ndarray) -> Any:
    """A numpy bool array as a null-free pyarrow boolean array."""
    # pyarrow (tens of ms to import): only the runs that use it pay
    import pyarrow as pa

    bits = np.packbits(np.asarray(values, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
