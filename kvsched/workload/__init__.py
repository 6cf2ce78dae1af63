"""Workloads: the requests a run replays, from an inline list, a seeded generator or a trace
file (`build`), in one of the trace formats (`kvsched.trace_formats`, one entry per
format, below the schema that reads it), the fast readers of a clean CSV trace
(`trace_csv`) and of a clean JSON-lines one (`trace_jsonl`), and what a run's warnings say
of a trace (`trace_notes`).

The names below are the package's public face (`from kvsched.workload import
build_requests`, as before the package existed), imported on first use: `build` imports the
schema, which a caller may be importing."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    **dict.fromkeys(("MAX_LOCAL_ID", "PREFIX_GROUP", "TAG_SHIFT", "TRACE_BLOCK", "TURN",
                     "Locate", "build_requests", "count_requests", "segment_id",
                     "trace_layout"), "kvsched.workload.build"),
    **dict.fromkeys(("FORMATS", "UNIT_SECONDS", "TraceLayout"), "kvsched.trace_formats"),
}

__all__ = ["FORMATS", "MAX_LOCAL_ID", "PREFIX_GROUP", "TAG_SHIFT", "TRACE_BLOCK", "TURN",
           "UNIT_SECONDS", "Locate", "TraceLayout", "build_requests", "count_requests",
           "segment_id", "trace_layout"]
assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvsched.workload' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from kvsched.trace_formats import FORMATS, UNIT_SECONDS, TraceLayout
    from kvsched.workload.build import (
        MAX_LOCAL_ID,
        PREFIX_GROUP,
        TAG_SHIFT,
        TRACE_BLOCK,
        TURN,
        Locate,
        build_requests,
        count_requests,
        segment_id,
        trace_layout,
    )
