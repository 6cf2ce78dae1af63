"""What a trace's arrival times say about it: the span and rate `validate` prints, and the
unit slips they suggest (a trace in milliseconds read as seconds replays a minute as 17
hours, at a trickle, and every figure it gives is quietly wrong)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from kvsched.request import Request
from kvsched.scenario import Scenario
from kvsched.schema import TraceWorkload
from kvsched.workload.build import build_requests, trace_layout

MS_GAP = 1000.0
"""A median gap of this many 'seconds' between whole-number timestamps reads as milliseconds."""
IDLE_SPAN = 3 * 3600.0
IDLE_BUSY = 0.05
"""A replay over more than three hours with the engine busy under 5% of it is probably a
trace in milliseconds (or microseconds) read as seconds."""
_FIX = "set columns.arrival_unit: ms (or time_scale: 0.001) if they are milliseconds"


def arrivals(requests: Sequence[Request]) -> np.ndarray:
    """The requests' arrival times as an array (a `RequestColumns` holds one already)."""
    column = getattr(requests, "arrival_time", None)
    if isinstance(column, np.ndarray):
        return column
    return np.fromiter((r.arrival_time for r in requests), dtype=np.float64,
                       count=len(requests))


class Replayed(NamedTuple):
    """One trace as the variants that share it replay it."""

    spec: TraceWorkload
    requests: Sequence[Request]
    variants: tuple[str, ...]


def traces_of(scenario: Scenario, workloads: dict[str, Sequence[Request]] | None = None,
              names: Sequence[str] = ()) -> list[Replayed]:
    """Each distinct trace the (selected) variants replay, with its requests: from
    `workloads` (`runner.prepare`'s) where given, else read now."""
    seen: dict[TraceWorkload, tuple[Sequence[Request], list[str]]] = {}
    for variant in scenario.variants:
        spec = variant.spec.workload
        if not isinstance(spec, TraceWorkload) or (names and variant.name not in names):
            continue
        if spec in seen:
            seen[spec][1].append(variant.name)
            continue
        built = (workloads or {}).get(variant.name)
        seen[spec] = (built if built is not None else build_requests(
            spec, 0, scenario.base_dir, variant.error), [variant.name])
    return [Replayed(spec, requests, tuple(variants))
            for spec, (requests, variants) in seen.items()]


def duration_text(seconds: float) -> str:
    """A span as a person reads it: 45 s, 12.5 min, 3.2 h, 6.1 days."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"


def span_line(trace: Replayed, named: bool = False) -> str:
    """`trace PATH: N requests over SPAN (R req/s)`, as replayed (window and time_scale
    applied); `named`: with the variants that replay it so (when traces differ by variant)."""
    times = arrivals(trace.requests)
    span = float(times.max() - times.min()) if times.size else 0.0
    rate = f"{(times.size - 1) / span:.4g} req/s" if span > 0 else "all at one instant"
    who = f" ({', '.join(trace.variants)})" if named else ""
    return (f"trace {trace.spec.path}{who}: {times.size:,} requests over "
            f"{duration_text(span)} ({rate})")


def _seconds_column(spec: TraceWorkload) -> bool:
    """Whether the file's own arrival column is read as seconds, unscaled: only then can a
    millisecond column pass for seconds."""
    layout = trace_layout(spec)
    return layout.arrival_time is not None and layout.arrival_unit == "s" \
        and spec.time_scale == 1.0


def timestamp_slip(spec: TraceWorkload, requests: Sequence[Request]) -> str | None:
    """Whole-number timestamps a thousand or more 'seconds' apart (the median gap)."""
    if not _seconds_column(spec):
        return None
    times = arrivals(requests)
    if times.size < 3 or not np.all(times == np.floor(times)):
        return None
    gaps = np.diff(np.sort(times))
    gaps = gaps[gaps > 0]
    if not gaps.size or float(np.median(gaps)) < MS_GAP:
        return None
    return (f"workload.path: {spec.path}'s arrival times are whole numbers a median "
            f"{float(np.median(gaps)):,.0f} s apart; {_FIX}")


def idle_slip(spec: TraceWorkload, requests: Sequence[Request],
              summary: dict[str, Any]) -> str | None:
    """A replay of hours during which the engine was almost never busy (after a run)."""
    if not _seconds_column(spec):
        return None
    times = arrivals(requests)
    span = float(times.max() - times.min()) if times.size else 0.0
    busy = summary.get("busy_fraction")
    if span <= IDLE_SPAN or busy is None or busy >= IDLE_BUSY:
        return None
    return (f"workload.path: {spec.path} spans {duration_text(span)} and the engine was busy "
            f"{100 * busy:.2g}% of the run; {_FIX}")
