"""`%.10g` for a whole float column at C speed, the same bytes as Python's `%`.

Why: `steps.csv` holds a row per step, and one `"%.10g" % value` call per float cell costs
about half a second per million rows; the file must keep its exact bytes. `%.10g` rounds the
value's exact binary expansion to 10 significant digits (ties to even), writes it in fixed
notation when the decimal exponent X of the rounded value is in [-4, 10), and strips
trailing zeros and a bare point. For |x| in [1e-4, 1e10) one float multiply by an exact
power of ten, `|x| * 10**(9 - X)`, is the exact product rounded once: its error is below
1e-6, so rounding it to an integer m gives the right 10 digits unless its fraction lies
within 1e-5 of one half. The text is m's ten digits (Arrow's integer cast writes them) with
a point after the X + 1-th, or "0." and -X - 1 zeros before them when X < 0; Arrow's trim
kernels then drop the trailing zeros (they stop at the point) and a bare point. The
near-ties, values whose exponent guess may be off by one (near a power of ten), the
exponent-notation range, zeros and non-finite values go through Python's `%`: a handful
per million.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from kvsched.arrow import int64s, mask, texts

FORMAT = "%.10g"
"""How every CSV writer formats a float (enough digits for microseconds over a day; the C
loop's writer, kvsched/_fastcore.c, writes the same bytes)."""
_TIE = 1e-5  # distance from one half below which the float product may round wrongly
_SCALE = 10.0 ** np.arange(0, 14)  # exact in binary (up to 1e22)
_ZERO, _POINT, _MINUS, _SPACE = ord("0"), ord("."), ord("-"), ord(" ")


def cell_text(value: Any) -> str:
    """One value as the text of the CSV cell the writers produce (None: empty)."""
    if value is None:
        return ""
    if type(value) is float:
        return FORMAT % value
    return str(value)


def formatted(rows: Iterable[Sequence[Any]]) -> Iterator[list[Any]]:
    """Rows with their floats as `FORMAT` (the csv module writes the rest)."""
    fmt = FORMAT
    return ([fmt % v if type(v) is float else v for v in row] for row in rows)


def format_floats(values: Any) -> Any:
    """`FORMAT % v` for every float of `values`, as a pyarrow string array."""
    # pyarrow (tens of ms to import): only the runs that use it pay
    import pyarrow as pa
    import pyarrow.compute as pc

    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if not n:
        return texts([])
    bits = x.view(np.int64)
    if (bits == bits[0]).all():  # a constant column (durations, ratios): one text, repeated
        one = (FORMAT % x[0]).encode()
        offsets = np.arange(0, (n + 1) * len(one), len(one), dtype=np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets),
                                           pa.py_buffer(one * n))
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exp = np.floor(np.log10(a))
        fast = (exp >= -4) & (exp <= 9)  # False for zeros, inf and nan
        e = np.where(fast, exp, 0).astype(np.int64)
        scaled = a * _SCALE[9 - e]
        mantissa = np.rint(scaled)
        # Exactly 1e9: the exponent guess may be one too high; 1e10: one too low.
        fast &= (np.abs(scaled - np.floor(scaled) - 0.5) > _TIE) & (mantissa > 1e9) & (
            mantissa < 1e10)
    m = np.where(fast, mantissa, 1e9).astype(np.int64)
    digits = np.frombuffer(pc.cast(int64s(m), pa.string()).buffers()[2],
                           dtype=np.uint8, count=10 * n).reshape(n, 10)
    # Rows of equal width: the sign (or a space), then the number with its trailing zeros.
    lowest = int(e.min())
    width = 1 + (12 if lowest >= 0 else 12 - lowest)
    out = np.full((n, width), _ZERO, dtype=np.uint8)
    out[:, 0] = np.where(np.signbit(x), _MINUS, _SPACE)
    order = None if n < 2 or (e[1:] >= e[:-1]).all() else np.argsort(e, kind="stable")
    if order is not None:
        e, digits, out = e[order], digits[order], out[order]
    bounds = np.flatnonzero(np.diff(e)) + 1
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), n], strict=True):
        k = int(e[lo])
        d = digits[lo:hi]
        if k >= 0:  # " 123.4567000"
            out[lo:hi, 1:k + 2] = d[:, :k + 1]
            out[lo:hi, k + 2] = _POINT
            out[lo:hi, k + 3:12] = d[:, k + 1:]
        else:  # " 0.001234567000"
            out[lo:hi, 2] = _POINT
            out[lo:hi, 2 - k:12 - k] = d
    if order is not None:
        unsorted = np.empty_like(out)
        unsorted[order] = out
        out = unsorted
    offsets = pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    text = pa.StringArray.from_buffers(n, offsets, pa.py_buffer(out))
    text = pc.ascii_rtrim(pc.ascii_rtrim(text, characters="0"), characters=".")
    text = pc.ascii_ltrim(text, characters=" ")
    slow = np.flatnonzero(~fast)
    if len(slow):
        text = pc.replace_with_mask(text, mask(~fast),
                                    texts([FORMAT % v for v in x[slow].tolist()]))
    return text


def format_list(values: Any) -> list[str]:
    """`format_floats` as Python strings (for tests and small columns)."""
    return format_floats(values).to_pylist()
