"""Each request's life as intervals, read from events.csv (and requests.csv's first token).

A request is `queued` from its arrival to its first admission; `prefill` from an admission
to its first token; `decode` from then to its finish; `preempted` from a recompute
preemption to its readmission, then `recompute` (its context computed again: the
admission's step, or the steps batches.csv shows it prefilling); `swapped` from a swap-out
to its swap-in. With batches.csv, a prefill is drawn as its chunks, one interval per step
that computed part of the prompt. An interval still open when the records end (a request
unfinished or starved) ends at the run's end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kvsched.report_view.run_view import Columns

KINDS = ("queued", "prefill", "recompute", "decode", "preempted", "swapped")
"""Phase kinds, in the order of their codes."""
QUEUED, PREFILL, RECOMPUTE, DECODE, PREEMPTED, SWAPPED = range(len(KINDS))


@dataclass(frozen=True, slots=True)
class Phases:
    """Intervals as parallel arrays, grouped by request in requests.csv's order and by time
    within one: `request` (row in requests.csv), `kind` (a code of KINDS), `start`, `end`."""

    request: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)


class StepEnds:
    """When a step ended, per replica (a compact stretch's steps share its time evenly)."""

    def __init__(self, steps: Columns | None) -> None:
        self._rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        if steps is None:
            return
        replicas = steps.get("replica")
        for replica in [0] if replicas is None else sorted({int(r) for r in replicas}):
            rows = slice(None) if replicas is None else replicas == replica
            first = steps["step"][rows]
            count = steps["num_steps"][rows] if "num_steps" in steps else np.ones(len(first))
            self._rows[replica] = (first, count, steps["time"][rows], steps["duration"][rows])

    def end_of(self, replica: int, step: int) -> float | None:
        """The end of `replica`'s step number `step`, or None if it is not recorded."""
        found = self._rows.get(replica)
        if found is None:
            return None
        first, count, start, duration = found
        i = int(np.searchsorted(first, step, side="right")) - 1
        if i < 0 or step >= first[i] + count[i]:
            return None
        return float(start[i] + (step - first[i] + 1) * duration[i] / count[i])


def request_phases(requests: Columns, events: Columns, end_time: float,
                   steps: Columns | None = None, batches: Columns | None = None) -> Phases:
    """The phases of every request in `requests`, from `events` (see the module's doc)."""
    index = {rid: i for i, rid in enumerate(requests["request_id"])}
    first_token = requests["first_token_time"]
    ends = StepEnds(steps)
    replica_of = events.get("replica")
    out_req: list[int] = []
    out_kind: list[int] = []
    out_start: list[float] = []
    out_end: list[float] = []

    def add(row: int, kind: int, start: float, end: float) -> None:
        if end >= start:
            out_req.append(row)
            out_kind.append(kind)
            out_start.append(start)
            out_end.append(end)

    state: dict[int, tuple[int, float, bool]] = {}  # row -> (kind, since, ever admitted)
    times = events["time"].tolist()
    steps_of = events["step"].tolist()
    for k, (rid, event) in enumerate(zip(events["request_id"], events["event"], strict=True)):
        row = index.get(rid)
        if row is None:
            continue
        now = times[k]
        kind, since, admitted = state.get(row, (QUEUED, now, False))
        if event == "arrive":
            state[row] = (QUEUED, now, False)
        elif event == "admit":
            add(row, PREEMPTED if admitted else QUEUED, since, now)
            if not admitted:
                state[row] = (PREFILL, now, True)
            else:
                replica = 0 if replica_of is None else int(replica_of[k])
                done = ends.end_of(replica, int(steps_of[k]))
                stop = done if done is not None else now
                add(row, RECOMPUTE, now, stop)
                state[row] = (DECODE, stop, True)
        elif event == "preempt":
            _close_running(add, row, kind, since, now, first_token[row])
            state[row] = (PREEMPTED, now, True)
        elif event == "swap_out":
            state[row] = (SWAPPED, since if kind == PREEMPTED else now, True)
        elif event == "swap_in":
            add(row, SWAPPED, since, now)
            state[row] = (DECODE, now, True)
        elif event in ("finish", "starve", "reject"):
            if kind in (PREFILL, DECODE):
                _close_running(add, row, kind, since, now, first_token[row])
            else:
                add(row, kind, since, now)
            state[row] = (-1, now, admitted)
    for row, (kind, since, _) in state.items():
        if kind == -1:
            continue
        if kind in (PREFILL, DECODE):
            _close_running(add, row, kind, since, end_time, first_token[row])
        else:
            add(row, kind, since, end_time)
    phases = Phases(np.array(out_req, dtype=np.int64), np.array(out_kind, dtype=np.int64),
                    np.array(out_start, dtype=float), np.array(out_end, dtype=float))
    if batches is not None and len(phases):
        phases = _chunked(phases, requests, batches, ends)
    order = np.lexsort((phases.start, phases.request))
    return Phases(phases.request[order], phases.kind[order], phases.start[order],
                  phases.end[order])


def _close_running(add: Callable[[int, int, float, float], None], row: int, kind: int,
                   since: float, now: float, first_token: float) -> None:
    """End a prefill or decode interval at `now`; a prefill that produced its first token on
    the way turns into decode there."""
    if kind == PREFILL and first_token == first_token and since <= first_token < now:
        add(row, PREFILL, since, float(first_token))
        add(row, DECODE, float(first_token), now)
    else:
        add(row, kind, since, now)


def _chunked(phases: Phases, requests: Columns, batches: Columns, ends: StepEnds) -> Phases:
    """Prefill and recompute intervals replaced by the steps that computed their chunks."""
    index = {rid: i for i, rid in enumerate(requests["request_id"])}
    prefill_steps: dict[int, list[tuple[float, float]]] = {}
    replicas = batches.get("replica")
    for k, (rid, phase) in enumerate(zip(batches["request_id"], batches["phase"], strict=True)):
        if phase != "prefill":
            continue
        row = index.get(rid)
        if row is None:
            continue
        start = float(batches["time"][k])
        replica = 0 if replicas is None else int(replicas[k])
        stop = ends.end_of(replica, int(batches["step"][k]))
        prefill_steps.setdefault(row, []).append((start, stop if stop is not None else start))
    keep = np.ones(len(phases), dtype=bool)
    extra: list[tuple[int, int, float, float]] = []
    for i in np.flatnonzero((phases.kind == PREFILL) | (phases.kind == RECOMPUTE)).tolist():
        row = int(phases.request[i])
        start, end = phases.start[i], phases.end[i]
        chunks = [(a, b) for a, b in prefill_steps.get(row, ()) if start <= a < max(end, start
                                                                                   + 1e-12)]
        if not chunks:
            continue
        keep[i] = False
        extra += [(row, int(phases.kind[i]), a, b) for a, b in chunks]
    if not extra:
        return phases
    rows, kinds, starts, stops = (np.array(x) for x in zip(*extra, strict=True))
    return Phases(np.concatenate([phases.request[keep], rows.astype(np.int64)]),
                  np.concatenate([phases.kind[keep], kinds.astype(np.int64)]),
                  np.concatenate([phases.start[keep], starts.astype(float)]),
                  np.concatenate([phases.end[keep], stops.astype(float)]))
