"""The diagnosis' incidents as time intervals, with the records under them as evidence.

The diagnosis (summary.json `incidents`) names what went wrong over the whole run; a report
needs to say where. Each kind's interval is read from the records, never from a re-run:

- thrashing: where the thrash ratio (steps.csv `thrash_ratio`: recomputed or swapped over
  new tokens in the last GAP_STEPS steps) is above the diagnosis' threshold, episodes
  closer than GAP_STEPS steps or MERGE_SHARE of the run joined into one interval (without
  steps.csv, the preemptions themselves); an interval holds at least MIN_PREEMPTIONS
  preemptions (events.csv `preempt`, from a window before the signal rose), its marks;
- head_of_line: the head's `hol_block` to `hol_release` intervals (to the run's end when it
  never ran), the longest first;
- starvation: from the first starved request's arrival to the run's end;
- overload: the peak the diagnosis found (`peak_start`, `peak_end`), else the last three
  quarters of the arrivals, over which it measured the rates;
- imbalance: the arrival it names (`at`);
- tail_blowup, slo_violation, all_rejected, none_finished and any other: the whole run.

Each interval lists up to MAX_REQUESTS requests to show in the Gantt (the preempted, the
head and those it held, the starved, the slowest) and up to MAX_MARKS marks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvsched.report_view.run_view import VariantView

GAP_STEPS = 100  # the thrash metric's window (backpressure.window's default)
MERGE_SHARE = 0.05  # episodes closer than this share of the run are one interval
MIN_PREEMPTIONS = 3
MAX_SPANS = 20
MAX_REQUESTS = 200
MAX_MARKS = 5000


@dataclass(frozen=True, slots=True)
class Span:
    """One interval of an incident: `start`..`end` in the run's clock, on `replica` (None:
    the whole engine or cluster), what was found there (`note`), the requests that are its
    evidence and `marks` (time, request id, what happened)."""

    kind: str
    message: str
    start: float
    end: float
    replica: int | None
    note: str
    evidence: dict[str, Any] = field(default_factory=dict)
    requests: tuple[str, ...] = ()
    marks: tuple[tuple[float, str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "start": self.start,
                "end": self.end, "replica": self.replica, "note": self.note,
                "evidence": self.evidence, "requests": list(self.requests),
                "marks": [list(m) for m in self.marks]}


def incident_spans(view: VariantView) -> list[Span]:
    """Every incident of `view`'s diagnosis as one or more intervals."""
    spans: list[Span] = []
    for incident in view.summary.get("incidents") or ():
        if not isinstance(incident, dict):
            continue
        kind = str(incident.get("kind", "incident"))
        message = str(incident.get("message", kind))
        found_evidence = incident.get("evidence")
        evidence: dict[str, Any] = found_evidence if isinstance(found_evidence, dict) else {}
        finder = _FINDERS.get(kind, _whole_run)
        found = finder(view, kind, message, evidence)
        spans += found or _whole_run(view, kind, message, evidence)
    return spans


def _events(view: VariantView, *names: str) -> np.ndarray:
    return np.flatnonzero(np.isin(np.array(view.events["event"], dtype=object), names))


def _step_time(view: VariantView) -> float:
    """A typical step's duration (1 on a step clock)."""
    if view.time_unit == "steps":
        return 1.0
    steps = view.steps
    if steps is None or not len(steps["duration"]):
        return view.end_time / 1000 if view.end_time else 1.0
    durations = steps["duration"]
    if "num_steps" in steps:
        durations = durations / steps["num_steps"]
    return float(np.median(durations))


def _thrashing(view: VariantView, kind: str, message: str,
               evidence: dict[str, Any]) -> list[Span]:
    preempts = _events(view, "preempt")
    ev = view.events
    replicas = ev["replica"][preempts] if "replica" in ev else np.zeros(len(preempts))
    window = GAP_STEPS * _step_time(view)
    merge = max(window, MERGE_SHARE * view.end_time)
    threshold = _threshold(view)
    found = []
    for replica in view.replicas:
        mine = preempts[replicas == replica]
        times = ev["time"][mine]
        above = _signal_times(view, replica, threshold)
        if above is None:  # no thrash_ratio: the preemptions themselves
            above, how = times, "preemptions"
        else:
            how = "signal"
        if not len(above):
            continue
        breaks = np.flatnonzero(np.diff(above) > merge) + 1
        for group in np.split(above, breaks):
            start, end = float(group[0]), float(group[-1])
            count = _steps_between(view, replica, start, end, threshold)
            # the preemptions that raised the signal come up to a window before it
            inside = mine[(times >= start - window) & (times <= end)]
            if len(inside) < MIN_PREEMPTIONS:
                continue
            if len(inside):
                start = min(start, float(ev["time"][inside[0]]))
            found.append((replica, start, end, inside, how, count))
    found.sort(key=lambda f: (-len(f[3]), f[1]))
    spans = []
    for replica, start, end, inside, how, count in found[:MAX_SPANS]:
        rows = inside.tolist()
        victims = list(dict.fromkeys(ev["request_id"][i] for i in rows))
        recomputed = _sum_steps(view, "recomputed_tokens", start, end, replica)
        swapped = sum(1 for i in rows if ev["detail"][i].startswith("swap"))
        note = f"{len(rows):,} preemptions of {len(victims):,} requests"
        if swapped:
            note += f" ({swapped:,} swapped out)"
        if recomputed:
            note += f", {recomputed:,.0f} tokens recomputed"
        if how == "signal":
            share = count[0] / max(1, count[1])
            note += (f"; the thrash ratio was above {threshold:g} in {100 * share:.0f}% of "
                     "the steps")
        spans.append(Span(kind, message, start, end, replica if view.clustered else None,
                          note, evidence, tuple(victims[:MAX_REQUESTS]),
                          tuple((float(ev["time"][i]), ev["request_id"][i], "preempt")
                                for i in rows[:MAX_MARKS])))
    spans.sort(key=lambda s: s.start)
    return spans


def _threshold(view: VariantView) -> float:
    diagnosis = (view.run.get("resolved") or {}).get("diagnosis") or {}
    value = diagnosis.get("thrash_ratio") if isinstance(diagnosis, dict) else None
    return float(value) if isinstance(value, int | float) else 0.2


def _replica_steps(view: VariantView, replica: int) -> np.ndarray | slice:
    steps = view.steps
    if steps is None or "replica" not in steps:
        return slice(None)
    return steps["replica"] == replica


def _signal_times(view: VariantView, replica: int, threshold: float) -> np.ndarray | None:
    """The start times of `replica`'s steps whose thrash ratio is above `threshold`."""
    steps = view.steps
    if steps is None or "thrash_ratio" not in steps:
        return None
    rows = _replica_steps(view, replica)
    return steps["time"][rows][steps["thrash_ratio"][rows] > threshold]


def _steps_between(view: VariantView, replica: int, start: float, end: float,
                   threshold: float) -> tuple[int, int]:
    """(steps above `threshold`, steps) of `replica` that started in start..end; a compact
    stretch counts its steps."""
    steps = view.steps
    if steps is None or "thrash_ratio" not in steps:
        return 0, 0
    rows = _replica_steps(view, replica)
    times = steps["time"][rows]
    counts = steps["num_steps"][rows] if "num_steps" in steps else np.ones(len(times))
    inside = (times >= start) & (times <= end)
    above = inside & (steps["thrash_ratio"][rows] > threshold)
    return int(counts[above].sum()), int(counts[inside].sum())


def _sum_steps(view: VariantView, column: str, start: float, end: float,
               replica: int) -> float:
    steps = view.steps
    if steps is None or column not in steps:
        return 0.0
    inside = (steps["time"] >= start) & (steps["time"] <= end)
    if "replica" in steps:
        inside &= steps["replica"] == replica
    return float(np.nansum(steps[column][inside]))


def _head_of_line(view: VariantView, kind: str, message: str,
                  evidence: dict[str, Any]) -> list[Span]:
    head = evidence.get("head")
    ids = view.events["request_id"]
    blocks = [i for i in _events(view, "hol_block", "hol_release").tolist() if ids[i] == head]
    intervals: list[tuple[float, float, bool]] = []
    opened: float | None = None
    for i in blocks:
        time = float(view.events["time"][i])
        if view.events["event"][i] == "hol_block":
            opened = time
        elif opened is not None:
            intervals.append((opened, time, True))
            opened = None
    if opened is not None:
        intervals.append((opened, view.end_time, False))
    intervals.sort(key=lambda iv: (-(iv[1] - iv[0]), iv[0]))
    req = view.requests
    arrival, scheduled = req["arrival_time"], req["first_scheduled_time"]
    spans = []
    for start, end, released in intervals[:MAX_SPANS]:
        held = np.flatnonzero((arrival <= end) & ~(scheduled <= start))
        held_ids = [req["request_id"][i] for i in held.tolist() if req["request_id"][i] != head]
        how = "until released" if released else "to the end of the run"
        note = f"{head} at the head {how}; {len(held_ids):,} requests waiting behind it"
        spans.append(Span(kind, message, start, end, None, note, evidence,
                          tuple([str(head), *held_ids][:MAX_REQUESTS]),
                          ((start, str(head), "hol_block"),)))
    spans.sort(key=lambda s: s.start)
    return spans


def _starvation(view: VariantView, kind: str, message: str,
                evidence: dict[str, Any]) -> list[Span]:
    req = view.requests
    starved = [i for i, s in enumerate(req["status"]) if s == "starved"]
    ids = [req["request_id"][i] for i in starved]
    worst = evidence.get("worst_overtaken")
    if worst and worst not in ids:
        ids.insert(0, str(worst))
    if not ids:
        return []
    index = {rid: i for i, rid in enumerate(req["request_id"])}
    start = float(min(req["arrival_time"][index[r]] for r in ids if r in index))
    end = view.end_time
    if not starved and worst in index:
        row = index[worst]
        first = req["first_scheduled_time"][row]
        end = float(first) if first == first else end
    note = (f"{len(starved):,} requests never ran" if starved
            else f"{worst} overtaken while it waited")
    return [Span(kind, message, start, max(start, end), None, note, evidence,
                 tuple(ids[:MAX_REQUESTS]))]


def _overload(view: VariantView, kind: str, message: str,
              evidence: dict[str, Any]) -> list[Span]:
    req = view.requests
    if "peak_start" in evidence and "peak_end" in evidence:
        start, end = float(evidence["peak_start"]), float(evidence["peak_end"])
        note = "the peak of the waiting queue"
    else:
        arrivals = np.sort(req["arrival_time"][np.array(req["status"]) != "rejected"])
        if len(arrivals) < 2:
            return []
        first, last = float(arrivals[0]), float(arrivals[-1])
        start, end = first + (last - first) / 4, last
        note = "the last three quarters of the arrivals, where the rates were measured"
    inside = np.flatnonzero((req["arrival_time"] >= start) & (req["arrival_time"] <= end))
    waits = np.nan_to_num(req["e2e_latency"][inside], nan=np.inf)
    slowest = inside[np.argsort(-waits, kind="stable")][:MAX_REQUESTS]
    return [Span(kind, message, start, end, None, note, evidence,
                 tuple(req["request_id"][i] for i in slowest.tolist()))]


def _imbalance(view: VariantView, kind: str, message: str,
               evidence: dict[str, Any]) -> list[Span]:
    at = evidence.get("at")
    if not isinstance(at, int | float):
        return []
    replica = evidence.get("queued_replica")
    return [Span(kind, message, float(at), float(at),
                 int(replica) if isinstance(replica, int) else None,
                 f"replica {replica} had {evidence.get('queued')} queued while replica "
                 f"{evidence.get('idle_replica')} was idle", evidence)]


def _whole_run(view: VariantView, kind: str, message: str,
               evidence: dict[str, Any]) -> list[Span]:
    req = view.requests
    ttft = np.nan_to_num(req["ttft"], nan=np.inf)
    slowest = np.argsort(-ttft, kind="stable")[:MAX_REQUESTS]
    return [Span(kind, message, 0.0, view.end_time, None, "the whole run; the requests "
                 "are the slowest to their first token", evidence,
                 tuple(req["request_id"][i] for i in slowest.tolist()))]


_FINDERS = {"thrashing": _thrashing, "head_of_line": _head_of_line,
            "starvation": _starvation, "overload": _overload, "imbalance": _imbalance}
