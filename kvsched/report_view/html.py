"""The self-contained `report.html` of a run folder.

One file: the page's style and script (`kvsched/data/report.css`, `report.js`, written for
kvsched: a small SVG drawing of its own rather than a charting library, since what it
draws is four kinds of chart and a bundled library would outweigh the report of a small
run) inlined, and the run's data embedded as JSON. It loads nothing: a
Content-Security-Policy forbids every request, so it opens from disk the same anywhere.

The same records give the same bytes: the data is built in the records' order and the
packing (zlib at a fixed level) is deterministic.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from kvsched import __version__
from kvsched.paths import write_file
from kvsched.report_view.envelope import pack, pack_time, packed_levels, step_series
from kvsched.report_view.phases import KINDS, request_phases
from kvsched.report_view.run_view import RunView, VariantView, read_run, replica_rows, take
from kvsched.report_view.spans import incident_spans

REPORT_NAME = "report.html"
SUMMARY_KEYS = ("num_requests", "num_finished", "num_starved", "num_unfinished",
                "num_rejected", "ttft_p50", "ttft_p99", "tpot_p99", "e2e_p99", "throughput",
                "num_preemptions", "recomputed_tokens", "recompute_ratio", "peak_blocks_used",
                "busy_fraction", "duration")
STATUSES = ("finished", "unfinished", "starved", "rejected")
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data:")


def _asset(name: str) -> str:
    return (resources.files("kvsched") / "data" / name).read_text(encoding="utf-8")


def variant_data(view: VariantView) -> dict[str, Any]:
    """What the page needs of one variant: its summary, incidents as intervals, a packed
    timeline per replica, the requests' figures and their phases."""
    req = view.requests
    statuses = list(STATUSES) + sorted(set(req["status"]) - set(STATUSES))
    code = {name: i for i, name in enumerate(statuses)}
    replicas = []
    for replica in view.replicas:
        timeline = None
        if view.steps is not None:
            steps = take(view.steps, replica_rows(view.steps, replica, view.clustered))
            timeline = packed_levels(step_series(steps)) if len(steps["time"]) else None
        replicas.append({"replica": replica, "num_blocks": view.pools.get(replica, 0),
                         "timeline": timeline})
    phases = request_phases(req, view.events, view.end_time, view.steps, view.batches)
    requests = {
        "id": list(req["request_id"]),
        "status": pack(np.array([code[s] for s in req["status"]], dtype=float)),
        "arrival": pack_time(req["arrival_time"]),
        "first_token": pack_time(req["first_token_time"]),
        "finish": pack_time(req["finish_time"]),
        "ttft": pack_time(req["ttft"]),
        "tpot": pack_time(req["tpot"] if "tpot" in req else np.full(len(req["ttft"]), np.nan)),
        "e2e": pack_time(req["e2e_latency"]),
        "prompt": pack(req["prompt_len"]),
        "output": pack(req["output_len"]),
        "preemptions": pack(np.nan_to_num(req["num_preemptions"])),
        "replica": pack(np.nan_to_num(req["replica"], nan=-1)) if view.clustered else None,
    }
    summary = {key: view.summary.get(key) for key in SUMMARY_KEYS}
    return {
        "name": view.name, "records": view.records, "budget": view.max_num_batched_tokens,
        "end": view.end_time, "summary": _finite(summary), "statuses": statuses,
        "incidents": [_finite(span.as_dict()) for span in incident_spans(view)],
        "replicas": replicas, "requests": requests,
        "phases": {"request": pack(phases.request), "kind": pack(phases.kind),
                   "start": pack_time(phases.start), "end": pack_time(phases.end)},
    }


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def report_data(run: RunView) -> dict[str, Any]:
    return {"kvsched": __version__, "scenario": run.scenario,
            "description": run.description, "time_unit": run.variants[0].time_unit,
            "kinds": list(KINDS), "variants": [variant_data(v) for v in run.variants]}


def render(data: dict[str, Any]) -> str:
    """The page, whole."""
    payload = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("</", "<\\/")  # never closes the script element early
    title = f"kvsched report: {data['scenario']}".replace("&", "&amp;").replace("<", "&lt;")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n<style>\n{_asset('report.css')}</style>\n</head>\n"
            "<body>\n<div id=\"app\"></div>\n"
            f"<script type=\"application/json\" id=\"kvsched-data\">{payload}</script>\n"
            f"<script>\n{_asset('report.js')}</script>\n</body>\n</html>\n")


def write_report(folder: Path) -> Path:
    """Write `<folder>/report.html` for the run folder `folder`, whole or not at all."""
    path = folder / REPORT_NAME
    write_file(path, render(report_data(read_run(folder))), option=str(folder))
    return path
