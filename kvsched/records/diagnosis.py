"""Naming what went wrong in a run, with evidence.

The detectors read a run's records (and, for comparisons, the baseline variant's):
- starvation: requests that never ran (and why), or that waited more than
  `overtaken_factor` median end-to-end latencies while at least `overtaken_by` later
  arrivals overtook them;
- head_of_line: a head that cannot be admitted while a request behind it would fit, either
  forever (the head never runs) or for longer than `hol_factor` times the median
  end-to-end latency (waiting about one service time behind a big request is ordinary
  queueing, not an incident);
- thrashing: recompute ratio (or, under swap, tokens swapped per generated token) above
  `thrash_ratio` with at least `preemptions_per_request` preemptions per finished request
  (one unlucky preemption is not thrashing);
- tail_blowup: p99/p50 TTFT more than `tail_ratio` times the baseline's, with a worse p99;
  or one class's p99 more than `class_tail_ratio` times every other class's, and worse
  than the same class in the baseline;
- slo_violation: more than `slo_miss_share` of the admitted requests miss their SLO;
- overload: over the last three quarters of the arrivals, requests (not rejected at
  arrival) arrived more than `overload_ratio` times as fast as they finished while the engine
  was busy, and the waiting queue grew (its mean over the last quarter of the arrivals is
  over twice the first quarter's and at least `overload_queue`): the engine cannot keep up;
  or, when no other detector spoke, overload at peaks: requests spread over time whose
  queue-time p99 is over `overload_wait` times the median end-to-end latency, behind a
  waiting queue whose peak (mean per bucket) is at least `overload_queue`, with the engine
  busy 90% of that peak: the engine falls behind the bursts;
- all_rejected: every request was turned away at arrival (admission, or a pool or budget no
  request fits), so nothing was served;
- none_finished: no request finished (starved, unfinished at `max_steps`, rejected).
- imbalance (cluster runs only): one replica's p99 TTFT above `imbalance_ttft_ratio` (3)
  times the median of the other replicas' p99s and above it by more than the median
  end-to-end latency, or, at some arrival, one replica with at
  least `imbalance_queue` (8) requests queued while another had nothing queued or running
  (the thresholds live in `cluster:`).
A healthy run reports nothing.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kvsched.floatsum import fold
from kvsched.kinds import EventKind, IncidentKind, why_of
from kvsched.quantile import median, percentiles
from kvsched.records import RequestRecord, RunResult
from kvsched.records.metrics import slo_met
from kvsched.records.slo import Slo
from kvsched.records.table import (
    STATUS_CODE,
    STATUSES,
    Columns,
    columns_of,
    index_of,
    reasons_of,
    take,
)

CLUSTER_KINDS = (IncidentKind.IMBALANCE,)  # only a cluster run has them (and their flags)
KINDS = tuple(kind for kind in IncidentKind if kind not in CLUSTER_KINDS)
INCIDENT_KEYS = ("num_incidents", *(f"incident_{kind}" for kind in KINDS))
"""Summary keys the diagnosis adds: a count, and a 0/1 flag per kind (for `expect`)."""

_MOST_OVERTAKEN_CHECKED = 200  # longest waits examined for overtaking (bounds the cost)
_OVERLOAD_BUSY_SHARE = 0.5  # an engine idle most of the arrival span is stuck, not overloaded


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a detector speaks up (the `diagnosis:` section of a scenario)."""

    thrash_ratio: float = 0.2
    preemptions_per_request: float = 0.2
    hol_factor: float = 2.0
    tail_ratio: float = 5.0
    class_tail_ratio: float = 5.0
    slo_miss_share: float = 0.05
    overtaken_factor: float = 10.0
    overtaken_by: int = 10
    overload_ratio: float = 1.2
    overload_queue: int = 10
    overload_wait: float = 1.0


@dataclass(frozen=True, slots=True)
class Incident:
    kind: IncidentKind
    message: str  # one line, for people
    evidence: dict[str, Any] = field(default_factory=dict)  # the figures behind it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(result: RunResult, thresholds: Thresholds = Thresholds(),
             baseline: RunResult | None = None, slo: Slo | None = None) -> list[Incident]:
    """Every incident found in `result` (compared with `baseline` where a detector needs one)."""
    found = [
        starvation(result, thresholds),
        head_of_line(result, thresholds),
        thrashing(result, thresholds),
        tail_blowup(result, thresholds, baseline),
        slo_violation(result, thresholds, slo),
        overload(result, thresholds),
        all_rejected(result),
        none_finished(result),
    ]
    if getattr(result, "replicas", ()):  # a kvsched.cluster.replicas.ClusterResult
        found.append(imbalance(result))
    if not any(found):  # a long tail that nothing above explains
        found.append(overload_at_peaks(result, thresholds))
    return [incident for incident in found if incident is not None]


def incident_flags(incidents: list[Incident], cluster: bool = False) -> dict[str, int]:
    """`num_incidents` and a 0/1 flag per kind (cluster runs: the cluster kinds too)."""
    kinds = {incident.kind for incident in incidents}
    known = KINDS + CLUSTER_KINDS if cluster else KINDS
    return {"num_incidents": len(incidents),
            **{f"incident_{kind}": int(kind in kinds) for kind in known}}


# -- detectors --------------------------------------------------------------------------


def _unit(result: RunResult) -> str:
    return "steps" if result.time_unit == "steps" else "s"


def _columns(result: RunResult) -> Columns:
    return columns_of(result.requests)


def _end_time(result: RunResult) -> float:
    arrivals = _columns(result).arrival_time
    return max(result.summary["duration"], float(arrivals.max())) if arrivals.size else 0.0


def starvation(result: RunResult, thresholds: Thresholds) -> Incident | None:
    unit = _unit(result)
    end = _end_time(result)
    c = _columns(result)
    starved = np.flatnonzero(c.status == STATUS_CODE["starved"])
    starved_arrivals = c.arrival_time[starved]
    del c  # (a long run's columns: one set at a time)
    overtaken = _overtaken(result, thresholds)
    if not starved.size and not overtaken:
        return None
    parts = []
    evidence: dict[str, Any] = {}
    if starved.size:
        groups = Counter(why_of(r) for r in reasons_of(result.requests, starved.tolist()))
        longest = max(end - t for t in starved_arrivals.tolist())
        why = ", ".join(f"{n}: {group}" for group, n in groups.most_common())
        waited = f", waiting up to {longest:.4g} {unit}" if longest > 0 else ""
        parts.append(f"{len(starved)} never ran ({why}){waited}")
        evidence |= {"num_starved": len(starved), "reasons": dict(groups),
                     "longest_wait": longest}
    if overtaken:
        worst = max(overtaken, key=lambda item: item[1])
        parts.append(f"{len(overtaken)} waited over {thresholds.overtaken_factor:g}x the "
                     f"median end-to-end latency while later arrivals overtook them (worst "
                     f"{worst[0].request_id}: {worst[1]:.4g} {unit}, overtaken by {worst[2]})")
        evidence |= {"num_overtaken": len(overtaken), "worst_overtaken": worst[0].request_id,
                     "worst_overtaken_wait": worst[1], "overtaken_by": worst[2]}
    return Incident(IncidentKind.STARVATION, "starvation: " + "; ".join(parts), evidence)


def _overtaken(result: RunResult,
               thresholds: Thresholds) -> list[tuple[RequestRecord, float, int]]:
    """Requests that waited > `overtaken_factor` x the median end-to-end latency and were
    overtaken by at least `overtaken_by` later arrivals (checked for the longest waits only)."""
    c = _columns(result)
    waits = c.queue_time  # NaN: never scheduled
    e2e = c.e2e_latency[~np.isnan(c.e2e_latency)]
    if np.count_nonzero(~np.isnan(waits)) < 2 or not e2e.size:
        return []
    limit = thresholds.overtaken_factor * median(e2e)
    del e2e
    # The longest waits over the limit, longest first (ties in input order).
    over = np.flatnonzero(waits > limit)
    over = over[np.argsort(-waits[over], kind="stable")[:_MOST_OVERTAKEN_CHECKED]]
    arrivals, starts = c.arrival_time, c.first_scheduled_time  # NaN start: never overtakes
    found = []
    for i in over.tolist():
        by = int(np.count_nonzero((arrivals > arrivals[i]) & (starts < starts[i])))
        if by >= thresholds.overtaken_by:
            found.append((take(result.requests, [i])[0], float(waits[i]), by))
    return found


def head_of_line(result: RunResult, thresholds: Thresholds) -> Incident | None:
    intervals = _hol_intervals(result)
    if not intervals:
        return None
    unit = _unit(result)
    c = _columns(result)
    rows = index_of(result.requests, (i[0] for i in intervals))
    status = {rid: STATUSES[c.status[row]] for rid, row in rows.items()}
    forever = [i for i in intervals if status.get(i[0]) in ("starved", "unfinished")
               and i[3] is None]
    head, detail, start, released, stop = max(intervals, key=lambda i: i[4] - i[2])
    e2e = c.e2e_latency[~np.isnan(c.e2e_latency)]
    typical = median(e2e) if e2e.size else None
    blocked = stop - start
    if not forever and (typical is None or blocked <= thresholds.hol_factor * typical):
        return None
    held = ((c.arrival_time <= stop) & (c.status != STATUS_CODE["rejected"])
            & ~(c.first_scheduled_time <= start))  # not scheduled by then (NaN: never)
    if head in rows:
        held[rows[head]] = False
    waiting = int(held.sum())
    if released is None and status.get(head) in ("starved", "unfinished"):
        span = "for good (it never runs)"
    else:
        span = f"for {blocked:.4g} {unit}"
        if typical:
            span += f", {blocked / typical:.3g}x the median end-to-end latency"
    message = f"head_of_line: {head} ({detail}) held {waiting} requests back {span}"
    if len(forever) > 1:
        message += f"; {len(forever)} heads never ran"
    return Incident(IncidentKind.HEAD_OF_LINE, message, {
        "head": head, "detail": detail, "held_back": waiting, "longest_block": stop - start,
        "median_e2e": typical, "heads_never_ran": len(forever), "num_blocks": len(intervals)})


def _hol_intervals(result: RunResult) -> list[tuple[str, str, float, float | None, float]]:
    """(head, detail, start, release time or None, end) from hol_block/hol_release events."""
    end = _end_time(result)
    open_: dict[str, tuple[str, float]] = {}
    intervals = []
    for _, time, request_id, event, detail in result.events:
        if event == EventKind.HOL_BLOCK:
            open_[request_id] = (detail, time)
        elif event == EventKind.HOL_RELEASE and request_id in open_:
            detail_, start = open_.pop(request_id)
            intervals.append((request_id, detail_, start, time, time))
    for request_id, (detail, start) in open_.items():
        intervals.append((request_id, detail, start, None, end))
    return intervals


def thrashing(result: RunResult, thresholds: Thresholds) -> Incident | None:
    s = result.summary
    ratio = s["recompute_ratio"]
    swapped = s["swapped_blocks"] * result.config.block_size
    swap_ratio = swapped / s["generated_tokens"] if s["generated_tokens"] else 0.0
    per_request = s["num_preemptions"] / max(1, s["num_finished"])
    if max(ratio, swap_ratio) <= thresholds.thrash_ratio \
            or per_request < thresholds.preemptions_per_request:
        return None
    computed = s["prefill_tokens"] + s["recomputed_tokens"] + s["decode_tokens"]
    share = s["recomputed_tokens"] / computed if computed else 0.0
    if ratio >= swap_ratio:
        what = (f"recompute ratio {ratio:.3g} > {thresholds.thrash_ratio:g}, {100 * share:.0f}% "
                f"of the computed tokens were recomputation")
    else:
        what = (f"{swap_ratio:.3g} tokens of KV swapped per generated token "
                f"({s['swapped_blocks']:,} blocks over PCIe)")
    return Incident(IncidentKind.THRASHING, (
        f"thrashing: {what}; {per_request:.2g} preemptions per finished request"), {
        "recompute_ratio": ratio, "swap_ratio": swap_ratio, "preemptions_per_request": per_request,
        "recompute_share": share, "backpressure_steps": s["backpressure_steps"]})


def tail_blowup(result: RunResult, thresholds: Thresholds,
                baseline: RunResult | None) -> Incident | None:
    s = result.summary
    base = baseline.summary if baseline is not None else None
    unit = _unit(result)
    parts = []
    evidence: dict[str, Any] = {}
    spread = _spread(s)
    if base is not None and spread is not None:
        base_spread = _spread(base)
        if base_spread and spread > thresholds.tail_ratio * base_spread \
                and s["ttft_p99"] > base["ttft_p99"]:
            parts.append(f"p99/p50 TTFT {spread:.3g} vs {base_spread:.3g} in the baseline "
                         f"(p99 {s['ttft_p99']:.4g} vs {base['ttft_p99']:.4g} {unit})")
            evidence |= {"spread": spread, "baseline_spread": base_spread}
    classes = [k[len("ttft_p99_"):] for k in s if k.startswith("ttft_p99_")]
    for name in classes:
        p99 = s[f"ttft_p99_{name}"]
        others = [s[f"ttft_p99_{o}"] for o in classes if o != name
                  and s[f"ttft_p99_{o}"] is not None]
        if p99 is None or not others or p99 <= thresholds.class_tail_ratio * max(others):
            continue
        base_p99 = base.get(f"ttft_p99_{name}") if base is not None else None
        if base_p99 is not None and p99 <= base_p99:
            continue
        versus = f", {p99 / base_p99:.3g}x the baseline's" if base_p99 else ""
        parts.append(f"class {name} p99 TTFT {p99:.4g} {unit} is {p99 / max(others):.3g}x "
                     f"the other classes'{versus}")
        evidence[f"ttft_p99_{name}"] = p99
    if not parts:
        return None
    return Incident(IncidentKind.TAIL_BLOWUP, "tail_blowup: " + "; ".join(parts), evidence)


def _spread(summary: dict[str, Any]) -> float | None:
    p50, p99 = summary.get("ttft_p50"), summary.get("ttft_p99")
    return p99 / p50 if p50 and p99 is not None else None


def slo_violation(result: RunResult, thresholds: Thresholds, slo: Slo | None) -> Incident | None:
    if slo is None or not slo.is_set:
        return None
    c = _columns(result)
    admitted = c.status != STATUS_CODE["rejected"]
    num_admitted = int(admitted.sum())
    if not num_admitted:
        return None
    missed = admitted & ~slo_met(c, slo)
    num_missed = int(missed.sum())
    share = num_missed / num_admitted
    if share <= thresholds.slo_miss_share:
        return None
    ttfts = c.ttft[missed & ~np.isnan(c.ttft)]
    worst = f", worst TTFT {float(ttfts.max()):.4g} {_unit(result)}" if ttfts.size else ""
    rejected = len(result.requests) - num_admitted
    targets = ", ".join(f"{k} <= {v:g}" for k, v in (("ttft", slo.ttft), ("e2e", slo.e2e))
                        if v is not None)
    return Incident(IncidentKind.SLO_VIOLATION, (
        f"slo_violation: {num_missed} of {num_admitted} admitted requests "
        f"({100 * share:.0f}%) missed {targets}{worst}; {rejected} rejected at arrival"), {
        "num_missed": num_missed, "miss_share": share, "num_rejected": rejected})


def overload(result: RunResult, thresholds: Thresholds) -> Incident | None:
    """Arrivals faster than the engine served while it was busy, and a queue that grows."""
    # Requests turned away at arrival were shed: the engine owed them nothing.
    c = _columns(result)
    arrivals = np.sort(c.arrival_time[c.status != STATUS_CODE["rejected"]])
    log = getattr(result, "step_log", None)  # a cluster's result has one per replica
    timeline = getattr(getattr(log, "stats", None), "timeline", None)
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0] or not result.summary["num_steps"] \
            or timeline is None:
        return None  # all at once: a queue that drains, not a rate
    start, last = float(arrivals[0]), float(arrivals[-1])
    span = last - start
    # Rates over the last three quarters of the arrivals: the requests in flight when that
    # window opens and when it closes cancel out unless the backlog grows.
    opens = start + span / 4
    arrived = int(np.count_nonzero(arrivals > opens))
    finished = int(np.count_nonzero((opens < c.finish_time) & (c.finish_time <= last)))
    arrival_rate, served_rate = arrived / (last - opens), finished / (last - opens)
    if arrival_rate <= thresholds.overload_ratio * served_rate:
        return None
    # The steps' busy time and queue, bucketed by start time over the arrival span.
    buckets = [(t, b, w, c) for t, b, w, c in zip(
        timeline.bucket_starts(), timeline.busy, timeline.waiting, timeline.count,
        strict=True) if start <= t < last]
    busy = fold(b for _, b, _, _ in buckets) / span
    if busy < _OVERLOAD_BUSY_SHARE:
        return None
    quarter = span / 4
    first = [(w, c) for t, _, w, c in buckets if t < start + quarter and c]
    final = [(w, c) for t, _, w, c in buckets if t >= last - quarter and c]
    if not first or not final:
        return None
    early = sum(w for w, _ in first) / sum(c for _, c in first)
    late = sum(w for w, _ in final) / sum(c for _, c in final)
    if late < thresholds.overload_queue or late <= 2 * early:
        return None
    unit = _unit(result)
    ttfts = c.ttft[~np.isnan(c.ttft)]
    p50 = f"; TTFT p50 {median(ttfts):.4g} {unit}" if ttfts.size else ""
    factor = arrival_rate / served_rate if served_rate else None
    times = f"{factor:.3g}x" if factor else "while none finished,"
    return Incident(IncidentKind.OVERLOAD, (
        f"overload: requests arrived at {arrival_rate:.4g}/{_per(unit)}, {times} the "
        f"{served_rate:.4g}/{_per(unit)} the engine finished while busy {100 * min(busy, 1):.0f}% "
        f"of the time; the waiting queue grew from {early:.4g} to {late:.4g} on average "
        f"(first vs last quarter of the arrivals){p50}"), {
        "arrival_rate": arrival_rate, "served_rate": served_rate, "busy_share": busy,
        "waiting_first_quarter": early, "waiting_last_quarter": late})


_PEAK_BINS = 64  # resolution of the peak over the arrival span


def overload_at_peaks(result: RunResult, thresholds: Thresholds) -> Incident | None:
    """Bursts the engine falls behind: no sustained overload, yet the unluckiest requests
    queue longer than the median request takes from arrival to finish, behind a waiting queue
    of at least `overload_queue`. The timeline samples the queue at steps, so an engine that
    sits idle beside a queue (stuck, not overloaded) cannot make one. Only asked when no other
    detector spoke: a TTFT p99 of 44 s is never 'no incident'."""
    c = _columns(result)
    arrivals = c.arrival_time[c.status != STATUS_CODE["rejected"]]
    log = getattr(result, "step_log", None)
    timeline = getattr(getattr(log, "stats", None), "timeline", None)
    finished = c.e2e_latency[c.status == STATUS_CODE["finished"]]
    waits = c.queue_time[~np.isnan(c.queue_time)]
    if len(arrivals) < 2 or arrivals.max() <= arrivals.min() or timeline is None \
            or not finished.size or not waits.size:
        return None  # all at once: a queue the workload makes, not a rate
    wait_p99, e2e_p50 = percentiles(waits, (99,))[0], median(finished)
    if wait_p99 <= thresholds.overload_wait * e2e_p50:
        return None
    # The timeline in _PEAK_BINS coarse bins: a burst's queue, not one step's.
    size = len(timeline.count)
    edges = [size * k // _PEAK_BINS for k in range(_PEAK_BINS + 1)]
    bins = [(sum(timeline.waiting[a:b]), sum(timeline.count[a:b]), fold(timeline.busy[a:b]))
            for a, b in itertools.pairwise(edges)]
    means = [w / n if n else 0.0 for w, n, _ in bins]
    top = max(range(len(means)), key=means.__getitem__)
    if means[top] < max(thresholds.overload_queue, 1):
        return None
    first = last = top  # the peak: where the queue stays above half its height
    while first > 0 and means[first - 1] >= means[top] / 2:
        first -= 1
    while last + 1 < len(means) and means[last + 1] >= means[top] / 2:
        last += 1
    begin = timeline.start + edges[first] * timeline.width
    end = timeline.start + edges[last + 1] * timeline.width
    busy = fold(b for _, _, b in bins[first:last + 1]) / (end - begin) if end > begin else 0.0
    unit = _unit(result)
    ttft_p99 = result.summary.get("ttft_p99")
    tail = f"TTFT p99 {ttft_p99:.4g} {unit}; " if ttft_p99 is not None else ""
    return Incident(IncidentKind.OVERLOAD, (
        f"overload at peaks: {tail}the unluckiest requests queued {wait_p99:.4g} {unit} (p99), "
        f"longer than the median request took from arrival to finish ({e2e_p50:.4g} {unit}); "
        f"the waiting queue peaked at {means[top]:.4g} on average between t={begin:.6g} and "
        f"t={end:.6g} (engine busy {100 * min(busy, 1):.0f}% of that time): it falls behind "
        f"at peaks (set slo: to measure what that costs)"), {
        "queue_time_p99": wait_p99, "e2e_p50": e2e_p50, "peak_waiting": means[top],
        "peak_start": begin, "peak_end": end, "busy_share": busy})


def _per(unit: str) -> str:
    return "step" if unit == "steps" else unit


def all_rejected(result: RunResult) -> Incident | None:
    requests = result.requests
    status = _columns(result).status
    if not len(requests) or (status != STATUS_CODE["rejected"]).any():
        return None
    groups = Counter(why_of(r) for r in reasons_of(requests, range(len(requests))))
    why = ", ".join(f"{n:,}: {group}" for group, n in groups.most_common())
    return Incident(IncidentKind.ALL_REJECTED, (
        f"all_rejected: all {len(requests):,} requests were rejected at arrival ({why}); "
        "nothing was served"), {"num_rejected": len(requests), "reasons": dict(groups)})


def none_finished(result: RunResult) -> Incident | None:
    requests = result.requests
    status = _columns(result).status
    if not len(requests) or (status == STATUS_CODE["finished"]).any() or (
            status == STATUS_CODE["rejected"]).all():
        return None
    statuses = Counter(STATUSES[k] for k in status.tolist())
    parts = ", ".join(f"{n:,} {status}" for status, n in statuses.most_common())
    return Incident(IncidentKind.NONE_FINISHED, (
        f"none_finished: none of the {len(requests):,} requests finished ({parts})"),
        {"statuses": dict(statuses)})


def imbalance(result: Any) -> Incident | None:
    """A cluster whose load is uneven (see the module docstring); `result` is a
    `kvsched.cluster.replicas.ClusterResult`."""
    unit = _unit(result)
    parts = []
    evidence: dict[str, Any] = {}
    p99s = [(i, r.summary["ttft_p99"]) for i, r in enumerate(result.replicas)
            if r.summary["ttft_p99"] is not None]
    if len(p99s) >= 2:
        worst, p99 = max(p99s, key=lambda item: (item[1], -item[0]))
        typical = median([v for i, v in p99s if i != worst])
        ratio = result.imbalance_ttft_ratio
        e2e = _columns(result).e2e_latency
        e2e = e2e[~np.isnan(e2e)]
        service = median(e2e) if e2e.size else 0.0
        # Far above: by the ratio, and by more than a typical request's whole service time
        # (a few unlucky requests on a lightly loaded replica are not an imbalance).
        if typical > 0 and p99 > ratio * typical and p99 - typical > service:
            parts.append(f"replica {worst}'s p99 TTFT {p99:.4g} {unit} is {p99 / typical:.3g}x "
                         f"the other replicas' median ({typical:.4g} {unit})")
            evidence |= {"worst_replica": worst, "worst_ttft_p99": p99,
                         "others_ttft_p99_median": typical}
    witness = result.idle_witness
    if witness is not None and witness[0] >= result.imbalance_queue:
        queue, busy, time, idle = witness
        parts.append(f"replica {busy} had {queue} requests queued at {time:.4g} {unit} while "
                     f"replica {idle} had nothing to do")
        evidence |= {"queued": queue, "queued_replica": busy, "at": time, "idle_replica": idle}
    if not parts:
        return None
    return Incident(IncidentKind.IMBALANCE, "imbalance: " + "; ".join(parts), evidence)
