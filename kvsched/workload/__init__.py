"""Workloads: the requests a run replays, from an inline list, a seeded generator or a trace
file (`build`), the trace formats (`formats`, one entry per format), the fast reader of a
clean CSV trace (`trace_csv`) and what a run's warnings say of a trace (`trace_notes`).

The names below are the package's public face (`from kvsched.workload import
build_requests`, as before the package existed)."""

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
)
from kvsched.workload.formats import FORMATS, UNIT_SECONDS, TraceLayout, trace_layout

__all__ = ["FORMATS", "MAX_LOCAL_ID", "PREFIX_GROUP", "TAG_SHIFT", "TRACE_BLOCK", "TURN",
           "UNIT_SECONDS", "Locate", "TraceLayout", "build_requests", "count_requests",
           "segment_id", "trace_layout"]
