"""The step timeline as min/max envelopes at several resolutions, packed for a web page.

Level 0 is the records themselves, a row per step (or per decode stretch under `--records
compact`, its token counts as per-step means); each next level groups FACTOR rows of the one
below into a bucket with its start, its end, each gauge's minimum and maximum and the
preemptions' sum, until a level has at most TOP_BUCKETS buckets. A viewer draws the coarsest
level that still gives a bucket per pixel of the visible window, so an hour of 900,000 steps
costs the same to draw as a minute, and zooming in reaches the steps themselves.

Level 0 is embedded only up to MAX_DETAIL_ROWS rows (the finer levels of a bigger run are
dropped and the report says how many steps its finest point holds), which bounds the file.

Columns are packed as little-endian typed arrays, zlib-compressed, in base64: integer
columns as int32 differences (a queue or a pool changes little from step to step and
compresses to almost nothing), start times as float64 with their bytes shuffled, durations
and means as float32. The page inflates them with the browser's own DecompressionStream (no
library, no network).
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from kvsched.report_view.run_view import Columns

FACTOR = 8
TOP_BUCKETS = 2048
MAX_DETAIL_ROWS = 1_000_000
GAUGES = ("running", "waiting", "used", "cached", "free", "tokens", "prefill", "recompute",
          "decode")
"""Series drawn as envelopes; `preempted` is summed instead."""
_SOURCES = {"running": "num_running", "waiting": "num_waiting", "used": "blocks_used",
            "cached": "cached_blocks", "free": "blocks_free", "tokens": "budget_used",
            "prefill": "prefill_tokens", "recompute": "recomputed_tokens",
            "decode": "decode_tokens"}
_PER_STEP = frozenset({"tokens", "prefill", "recompute", "decode"})
"""A compact stretch's sums, shown as per-step means."""


def pack(values: np.ndarray) -> dict[str, Any]:
    """A numeric column as {"type", "n", "data"}: see the module's doc for the types."""
    values = np.asarray(values, dtype=float)
    finite = values[np.isfinite(values)]
    if len(finite) == len(values) and np.all(finite == np.round(finite)) \
            and (not len(values) or np.abs(values).max() < 2 ** 30):
        ints = values.astype(np.int64)
        data = np.diff(ints, prepend=0).astype("<i4").tobytes()
        kind = "i32d"
    elif values.dtype == np.float64 and _needs_double(values):
        data, kind = values.astype("<f8").tobytes(), "f64"
    else:
        data, kind = values.astype("<f4").tobytes(), "f32"
    text = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
    return {"type": kind, "n": int(len(values)), "data": text}


def _needs_double(values: np.ndarray) -> bool:
    return bool(np.any(values.astype(np.float32).astype(np.float64) != values))


def pack_time(values: np.ndarray) -> dict[str, Any]:
    """Times as float64 (a step's start must not move), bytes shuffled (every value's first
    byte, then every second byte...: a clock's high bytes repeat and compress well)."""
    data = np.asarray(values, dtype="<f8").view(np.uint8).reshape(-1, 8).T.tobytes()
    return {"type": "f64s", "n": int(len(values)),
            "data": base64.b64encode(zlib.compress(data, 6)).decode("ascii")}


def pack_span(values: np.ndarray) -> dict[str, Any]:
    """Durations as float32: drawn, never added up."""
    data = np.asarray(values, dtype="<f4").tobytes()
    return {"type": "f32", "n": int(len(values)),
            "data": base64.b64encode(zlib.compress(data, 6)).decode("ascii")}


def step_series(steps: Columns) -> dict[str, np.ndarray]:
    """The rows of a steps.csv (one replica's) as the timeline's series: `t0`, `t1`, the
    GAUGES and `preempted`."""
    count = steps.get("num_steps", None)
    series = {"t0": steps["time"], "t1": steps["time"] + steps["duration"]}
    for name, column in _SOURCES.items():
        values = steps.get(column)
        if values is None:
            values = np.zeros(len(steps["time"]))
        values = np.nan_to_num(values)
        if count is not None and name in _PER_STEP:
            values = values / count
        series[name] = values
    series["preempted"] = np.nan_to_num(steps["num_preempted"])
    return series


def levels(series: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Level 0 (the rows: each gauge's `lo` and `hi` alike) and the coarser levels."""
    rows = len(series["t0"])
    base = {"t0": series["t0"], "t1": series["t1"], "preempted": series["preempted"]}
    for name in GAUGES:
        base[f"{name}.lo"] = base[f"{name}.hi"] = series[name]
    out = [base]
    while rows > TOP_BUCKETS:
        below = out[-1]
        starts = np.arange(0, rows, FACTOR)
        ends = np.minimum(starts + FACTOR, rows) - 1
        level = {"t0": below["t0"][starts], "t1": below["t1"][ends],
                 "preempted": np.add.reduceat(below["preempted"], starts)}
        for name in GAUGES:
            level[f"{name}.lo"] = np.minimum.reduceat(below[f"{name}.lo"], starts)
            level[f"{name}.hi"] = np.maximum.reduceat(below[f"{name}.hi"], starts)
        out.append(level)
        rows = len(starts)
    return out


def packed_levels(series: dict[str, np.ndarray]) -> dict[str, Any]:
    """The levels to embed, finest first, each packed, with `rows_per_point`: how many
    records the finest embedded point holds (1 unless the run is over MAX_DETAIL_ROWS)."""
    all_levels = levels(series)
    skip = 0
    while len(all_levels[skip]["t0"]) > MAX_DETAIL_ROWS:
        skip += 1
    out = []
    for level in all_levels[skip:]:
        packed: dict[str, Any] = {}
        for name, values in level.items():
            if name.endswith(".hi") and level is all_levels[0]:
                continue  # level 0: hi is lo
            if name == "t0":
                packed[name] = pack_time(values)
            elif name == "t1":
                packed["span"] = pack_span(values - level["t0"])
            else:
                packed[name] = pack(values)
        out.append(packed)
    return {"factor": FACTOR, "rows_per_point": FACTOR ** skip, "levels": out}
