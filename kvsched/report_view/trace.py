"""A run folder in the Chrome trace event format, which Perfetto and chrome://tracing open.

A JSON object with `traceEvents`: a process per variant and replica (`process_name`
metadata, `ph: M`), in it a `steps` track (a complete event, `ph: X`, per steps.csv row,
its batch in `args`), an `incidents` track (the incidents' intervals), a track per request
(its phases: queued, prefill, recompute, decode, preempted, swapped) and counters (`ph:
C`) for the queues (running, waiting) and the KV blocks (used, cached, free), written where
they change. Times are microseconds: a run in seconds keeps its clock; a run on the step
clock shows a step as one millisecond (`otherData.clock` says which).

`window` keeps what overlaps START..END (in the run's unit). A trace over MAX_EVENTS events
is refused in one line that names --trace-window, before anything is written: a viewer
loads a trace whole, and Perfetto's web viewer slows past about a million events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from kvsched import __version__
from kvsched.errors import KvschedError, excerpt
from kvsched.paths import write_file
from kvsched.report_view.phases import KINDS, request_phases
from kvsched.report_view.run_view import RunView, VariantView, replica_rows, take
from kvsched.report_view.spans import incident_spans

MAX_EVENTS = 1_000_000
STEPS_TID, INCIDENTS_TID, FIRST_REQUEST_TID = 1, 2, 10
_BATCH_ARGS = ("step", "num_steps", "num_running", "num_waiting", "num_prefill_requests",
               "prefill_tokens", "decode_tokens", "recomputed_tokens", "budget_used",
               "blocks_used", "blocks_free", "cached_blocks", "num_preempted", "num_admitted",
               "num_finished", "swapped_out_blocks", "swapped_in_blocks")
_COUNTERS = (("queue", (("running", "num_running"), ("waiting", "num_waiting"))),
             ("KV blocks", (("used", "blocks_used"), ("cached", "cached_blocks"),
                            ("free", "blocks_free"))))


def parse_window(text: str | None, option: str = "--trace-window") -> tuple[float, float] | None:
    """`START..END` as two numbers (START < END), or None when not given."""
    if text is None:
        return None
    parts = text.split("..")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = float(parts[0]), float(parts[1])
    except ValueError:
        raise KvschedError(f"{option}: expected START..END (two numbers in the run's time "
                           f"unit), got '{excerpt(text)}'") from None
    if not (math.isfinite(start) and math.isfinite(end)) or start >= end:
        raise KvschedError(f"{option}: expected START < END, both finite, got "
                           f"'{excerpt(text)}'")
    return start, end


def _scale(time_unit: str) -> float:
    return 1e6 if time_unit == "s" else 1e3


def _num(value: float) -> float | int:
    """A JSON number: integral values as integers, NaN as 0 (a counter needs a number)."""
    if value != value:
        return 0
    return int(value) if value == int(value) else float(value)


class _Plan:
    """One process's events, counted before they are made."""

    def __init__(self, pid: int, view: VariantView, replica: int,
                 window: tuple[float, float]) -> None:
        self.pid, self.view, self.replica = pid, view, replica
        start, end = window
        steps = view.steps
        self.steps = None
        self.changes: dict[str, np.ndarray] = {}
        if steps is not None:
            mine = take(steps, replica_rows(steps, replica, view.clustered))
            ends = mine["time"] + mine["duration"]
            rows = np.flatnonzero((ends >= start) & (mine["time"] <= end))
            self.steps = take(mine, rows)
            for name, series in _COUNTERS:
                values = [self.steps.get(col, np.zeros(len(rows))) for _, col in series]
                changed = np.zeros(len(rows), dtype=bool)
                if len(rows):
                    changed[0] = True
                for v in values:
                    changed[1:] |= np.nan_to_num(v[1:]) != np.nan_to_num(v[:-1])
                self.changes[name] = np.flatnonzero(changed)
        req = take(view.requests, replica_rows(view.requests, replica, view.clustered))
        self.requests = req
        events = take(view.events, replica_rows(view.events, replica, view.clustered))
        steps_all = (take(steps, replica_rows(steps, replica, view.clustered))
                     if steps is not None else None)
        phases = request_phases(req, events, view.end_time, steps_all,
                                None if view.clustered else view.batches)
        keep = (phases.end >= start) & (phases.start <= end)
        self.phases = [a[keep] for a in (phases.request, phases.kind, phases.start,
                                         phases.end)]
        self.spans = [s for s in incident_spans(view)
                      if (s.replica is None or s.replica == replica)
                      and s.end >= start and s.start <= end]

    def count(self) -> int:
        steps = 0 if self.steps is None else len(self.steps["time"])
        rows = len(np.unique(self.phases[0]))
        return (3 + steps + sum(len(c) for c in self.changes.values()) + len(self.spans)
                + len(self.phases[0]) + 2 * rows)

    def events(self, unit: float, label: str) -> Iterator[dict[str, Any]]:
        pid = self.pid
        yield {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
               "args": {"name": label}}
        yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": STEPS_TID,
               "args": {"name": "steps"}}
        yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": INCIDENTS_TID,
               "args": {"name": "incidents"}}
        for span in self.spans:
            yield {"name": span.kind, "cat": "incident", "ph": "X", "pid": pid,
                   "tid": INCIDENTS_TID, "ts": span.start * unit,
                   "dur": max(0.0, span.end - span.start) * unit,
                   "args": {"note": span.note, "message": span.message}}
        if self.steps is not None:
            s = self.steps
            present = [name for name in _BATCH_ARGS if name in s]
            columns = {name: s[name].tolist() for name in present}
            times, durations = s["time"].tolist(), s["duration"].tolist()
            counts = columns.get("num_steps")
            for i in range(len(times)):
                args = {name: _num(columns[name][i]) for name in present}
                name = "step" if counts is None or counts[i] == 1 else "decode stretch"
                yield {"name": name, "cat": "step", "ph": "X", "pid": pid, "tid": STEPS_TID,
                       "ts": times[i] * unit, "dur": durations[i] * unit, "args": args}
            for counter, series in _COUNTERS:
                for i in self.changes[counter].tolist():
                    yield {"name": counter, "ph": "C", "pid": pid, "ts": times[i] * unit,
                           "args": {key: _num(s[col][i]) if col in s else 0
                                    for key, col in series}}
        rows, kinds, starts, ends = self.phases
        ids = self.requests["request_id"]
        for row in np.unique(rows).tolist():
            yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": FIRST_REQUEST_TID + row,
                   "args": {"name": ids[row]}}
            yield {"name": "thread_sort_index", "ph": "M", "pid": pid,
                   "tid": FIRST_REQUEST_TID + row, "args": {"sort_index": FIRST_REQUEST_TID + row}}
        prompt, output = self.requests["prompt_len"], self.requests["output_len"]
        for row, kind, start, end in zip(rows.tolist(), kinds.tolist(), starts.tolist(),
                                         ends.tolist(), strict=True):
            yield {"name": KINDS[kind], "cat": "request", "ph": "X", "pid": pid,
                   "tid": FIRST_REQUEST_TID + row, "ts": start * unit,
                   "dur": (end - start) * unit,
                   "args": {"request_id": ids[row], "prompt_len": _num(prompt[row]),
                            "output_len": _num(output[row])}}


class Trace:
    """A run folder's trace, counted (`num_events`) before any of it is made."""

    def __init__(self, run: RunView, window: tuple[float, float] | None = None,
                 max_events: int | None = None) -> None:
        """Raises KvschedError when the trace would hold more than `max_events` events
        (MAX_EVENTS by default)."""
        if max_events is None:
            max_events = MAX_EVENTS
        self.run = run
        whole = (0.0, max(v.end_time for v in run.variants))
        self.window = window or whole
        self.plans: list[_Plan] = []
        for view in run.variants:
            for replica in view.replicas:
                self.plans.append(_Plan(len(self.plans) + 1, view, replica, self.window))
        self.num_events = sum(plan.count() for plan in self.plans)
        self.unit_name = run.variants[0].time_unit
        if self.num_events > max_events:
            shown = f"{self.window[0]:g}..{self.window[1]:g} {self.unit_name}"
            raise KvschedError(
                f"--trace-out: the trace of {run.folder} over {shown} would hold "
                f"{self.num_events:,} events, more than {max_events:,}; give a shorter "
                f"--trace-window START..END (the run spans {whole[0]:g}..{whole[1]:g} "
                f"{self.unit_name})")

    def pieces(self) -> Iterator[str]:
        """The trace's JSON text, in pieces."""
        unit = _scale(self.unit_name)
        clock = ("seconds (1 s = 1,000,000 us)" if self.unit_name == "s"
                 else "steps (a step is shown as 1 ms)")
        yield "{\"traceEvents\":[\n"
        first = True
        for plan in self.plans:
            view = plan.view
            label = view.name if not view.clustered else f"{view.name} / replica {plan.replica}"
            for event in plan.events(unit, label):
                yield ("" if first else ",\n") + json.dumps(event, separators=(",", ":"))
                first = False
        other = {"kvsched": __version__, "scenario": self.run.scenario, "clock": clock,
                 "window": list(self.window), "num_events": self.num_events}
        yield ("\n],\"displayTimeUnit\":\"ms\",\"otherData\":"
               + json.dumps(other, separators=(",", ":")) + "}\n")

    def write(self, path: Path) -> None:
        """Write the trace to `path` whole or not at all."""
        write_file(path, self.pieces(), option="--trace-out")
