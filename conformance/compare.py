"""Compare a recorded vLLM V1 run with kvsched's decisions on the same step clock.

Runs in the normal kvsched venv: stdlib only, no vLLM import.

The kvsched side is pluggable: any callable `fn(config, workload) -> dict` that
returns the same structure as a record's decisions, i.e.

    {"steps": [{"step": k, "scheduled": [[id, tokens], ...],
                "preempted": [id, ...], "finished": [id, ...], "rejected": [id, ...]}, ...],
     "requests": {id: {"first_token_step": int|None, "finish_step": int|None,
                       "num_preemptions": int, "status": str}, ...}}

(keys that are absent mean empty lists; other keys are ignored). `config` and
`workload` are the record's own, exactly as given to vLLM (see README.md).

With prefix caching on (`config.enable_prefix_caching`), each request's
`prefix_hit_tokens` (hit at its first admission) and `cached_tokens` (hits of all its
admissions) are compared too, and reported as hit agreement. A side that also returns
per-step `cached_blocks` (in every step) gets the cache's step fields that the record
carries compared: `hits` ([[id, tokens], ...] per admission), `cached_blocks` and
`evicted_blocks` (V0's records carry the hits only); a side
that returns per-request `hits` lists gets those compared.

    python -m conformance.compare RECORD.json|DIR ... --kvsched MODULE:CALLABLE
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Decisions = dict[str, Any]
KvschedFn = Callable[[dict[str, Any], dict[str, Any]], Decisions]

STEP_FIELDS = ("scheduled", "preempted", "finished", "rejected")
REQUEST_FIELDS = ("first_token_step", "finish_step", "num_preemptions", "status")
HIT_FIELDS = ("prefix_hit_tokens", "cached_tokens")  # with prefix caching on
CACHE_STEP_FIELDS = ("hits", "cached_blocks", "evicted_blocks")  # if the side gives them
DEFAULT_KVSCHED = "kvsched.decisions:vllm_v1_decisions"
RECORD_FORMATS = ("kvsched-vllm-v1-record/", "kvsched-vllm-v0-record/",
                  "kvsched-sglang-record/")
# V0 records (conformance/vllm_v0_driver.py) also say who was swapped out and in.
V0_STEP_FIELDS = ("swapped_out", "swapped_in")
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang"}


def is_v0(record: dict[str, Any]) -> bool:
    return str(record.get("format", "")).startswith("kvsched-vllm-v0-record/")


def load(path: str | Path) -> dict[str, Any]:
    record = json.loads(Path(path).read_text())
    if not str(record.get("format", "")).startswith(RECORD_FORMATS):
        raise ValueError(f"{path}: not a recorded engine run (format={record.get('format')!r})")
    return record


def record_paths(items: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        out.extend(sorted(p.glob("*.json")) if p.is_dir() else [p])
    return out


def recorded_decisions(record: dict[str, Any]) -> KvschedFn:
    """A KvschedFn that answers with the record's own decisions (for self-checks)."""
    def fn(config: dict[str, Any], workload: dict[str, Any]) -> Decisions:
        return {"steps": record["steps"], "requests": record["requests"]}
    return fn


def _norm_step(step: dict[str, Any] | None, strict_order: bool) -> dict[str, Any]:
    step = step or {}
    out: dict[str, Any] = {}
    sched = [(str(r), int(n)) for r, n in step.get("scheduled", [])]
    out["scheduled"] = sched if strict_order else sorted(sched)
    for key in ("preempted", "finished", "rejected", *V0_STEP_FIELDS):
        ids = [str(r) for r in step.get(key, [])]
        out[key] = ids if (strict_order and key == "preempted") else sorted(ids)
    hits = [(str(r), int(n)) for r, n in step.get("hits", [])]
    out["hits"] = hits if strict_order else sorted(hits)
    out["cached_blocks"] = step.get("cached_blocks")
    out["evicted_blocks"] = int(step.get("evicted_blocks", 0) or 0)
    return out


def _norm_request(req: dict[str, Any] | None) -> dict[str, Any]:
    req = req or {}
    return {
        "first_token_step": req.get("first_token_step"),
        "finish_step": req.get("finish_step"),
        "num_preemptions": int(req.get("num_preemptions", 0) or 0),
        "status": req.get("status"),
        "prefix_hit_tokens": req.get("prefix_hit_tokens"),
        "cached_tokens": int(req.get("cached_tokens", 0) or 0),
        "hits": [int(h) for h in req.get("hits", [])],
    }


@dataclass
class Report:
    name: str
    steps_total: int
    steps_agree: int
    requests_total: int
    requests_agree: int
    # step index -> {field: (vllm, kvsched)}
    step_diffs: dict[int, dict[str, tuple[Any, Any]]] = field(default_factory=dict)
    # request id -> {field: (vllm, kvsched)}
    request_diffs: dict[str, dict[str, tuple[Any, Any]]] = field(default_factory=dict)
    vllm_steps: list[dict[str, Any]] = field(default_factory=list)
    kvsched_steps: list[dict[str, Any]] = field(default_factory=list)
    # with prefix caching on: requests whose hits (HIT_FIELDS) agree, of those compared
    hits_total: int = 0
    hits_agree: int = 0
    step_fields: tuple[str, ...] = STEP_FIELDS
    engine: str = "vLLM"  # the recorded engine, as the side-by-side names it

    @property
    def agrees(self) -> bool:
        return not self.step_diffs and not self.request_diffs

    @property
    def first_disagreement(self) -> int | None:
        return min(self.step_diffs) if self.step_diffs else None

    @property
    def step_agreement(self) -> float:
        return self.steps_agree / self.steps_total if self.steps_total else 1.0

    @property
    def request_agreement(self) -> float:
        return self.requests_agree / self.requests_total if self.requests_total else 1.0

    @property
    def hit_agreement(self) -> float:
        return self.hits_agree / self.hits_total if self.hits_total else 1.0

    def summary(self) -> str:
        first = self.first_disagreement
        tail = "" if first is None else f", first disagreement at step {first}"
        hits = (f", hits {self.hits_agree}/{self.hits_total} ({100 * self.hit_agreement:.1f}%)"
                if self.hits_total else "")
        return (f"{self.name}: steps {self.steps_agree}/{self.steps_total} "
                f"({100 * self.step_agreement:.1f}%), requests "
                f"{self.requests_agree}/{self.requests_total} "
                f"({100 * self.request_agreement:.1f}%){hits}{tail}")


def compare(record: dict[str, Any], kvsched: Decisions | KvschedFn,
            strict_order: bool = False, name: str | None = None) -> Report:
    """Compare a record with kvsched's decisions (a Decisions dict or a KvschedFn).

    Steps are matched by index on the step clock; a step missing on one side is an
    empty step. `scheduled` compares (id, tokens) pairs; with `strict_order` also
    their order and the order of preemption victims.
    """
    if callable(kvsched):
        kvsched = kvsched(record["config"], record["workload"])
    vllm_steps = {int(s["step"]): s for s in record["steps"]}
    kv_steps = {int(s["step"]): s for s in kvsched.get("steps", [])}
    n = max([*vllm_steps, *kv_steps], default=-1) + 1
    caching = bool(record.get("config", {}).get("enable_prefix_caching"))
    step_fields: tuple[str, ...] = STEP_FIELDS + (V0_STEP_FIELDS if is_v0(record) else ())
    if caching and kv_steps and all("cached_blocks" in s for s in kv_steps.values()):
        # V0's records hold the hits, not the cache's size
        sized = any("cached_blocks" in s for s in record["steps"])
        step_fields += CACHE_STEP_FIELDS if sized else ("hits",)
    request_fields: tuple[str, ...] = REQUEST_FIELDS + (HIT_FIELDS if caching else ())
    kv_requests = kvsched.get("requests", {})
    if caching and any("hits" in r for r in kv_requests.values()):
        request_fields += ("hits",)
    step_diffs: dict[int, dict[str, tuple[Any, Any]]] = {}
    for k in range(n):
        a = _norm_step(vllm_steps.get(k), strict_order)
        b = _norm_step(kv_steps.get(k), strict_order)
        diff = {f: (a[f], b[f]) for f in step_fields if a[f] != b[f]}
        if diff:
            step_diffs[k] = diff
    ids = list(record["requests"])
    ids += [i for i in kv_requests if i not in record["requests"]]
    request_diffs: dict[str, dict[str, tuple[Any, Any]]] = {}
    hits_agree = 0
    for rid in ids:
        a = _norm_request(record["requests"].get(rid))
        b = _norm_request(kv_requests.get(rid))
        diff = {f: (a[f], b[f]) for f in request_fields if a[f] != b[f]}
        hits_agree += caching and not any(f in diff for f in HIT_FIELDS)
        if diff:
            request_diffs[rid] = diff
    return Report(
        name=name or record.get("workload", {}).get("name", "?"),
        steps_total=n,
        steps_agree=n - len(step_diffs),
        requests_total=len(ids),
        requests_agree=len(ids) - len(request_diffs),
        step_diffs=step_diffs,
        request_diffs=request_diffs,
        vllm_steps=[_norm_step(vllm_steps.get(k), True) for k in range(n)],
        kvsched_steps=[_norm_step(kv_steps.get(k), True) for k in range(n)],
        hits_total=len(ids) if caching else 0,
        hits_agree=hits_agree,
        step_fields=step_fields,
        engine=ENGINE_LABELS.get(record.get("engine", {}).get("name"), "vLLM"),
    )


def _fmt_step(s: dict[str, Any]) -> str:
    parts = [" ".join(f"{r}:{t}" for r, t in s["scheduled"]) or "-"]
    if s["preempted"]:
        parts.append("P[" + " ".join(s["preempted"]) + "]")
    if s["finished"]:
        parts.append("F[" + " ".join(s["finished"]) + "]")
    if s["rejected"]:
        parts.append("R[" + " ".join(s["rejected"]) + "]")
    if s["swapped_out"]:
        parts.append("SO[" + " ".join(s["swapped_out"]) + "]")
    if s["swapped_in"]:
        parts.append("SI[" + " ".join(s["swapped_in"]) + "]")
    if s["hits"]:
        parts.append("H[" + " ".join(f"{r}:{t}" for r, t in s["hits"]) + "]")
    if s["cached_blocks"] is not None:
        parts.append(f"C{s['cached_blocks']}" + (f"/E{s['evicted_blocks']}"
                                                 if s["evicted_blocks"] else ""))
    return " ".join(parts)


def side_by_side(report: Report, context: int = 3, width: int = 56) -> str:
    """Both step lists around the first disagreement, the engine left, kvsched right."""
    first = report.first_disagreement
    lines: list[str] = []
    if first is not None:
        lo = max(0, first - context)
        hi = min(report.steps_total, first + context + 1)
        lines.append(f"{'step':>5}  {report.engine + ' (recorded)':<{width}} | kvsched")
        for k in range(lo, hi):
            a = _fmt_step(report.vllm_steps[k])
            b = _fmt_step(report.kvsched_steps[k])
            mark = "<<" if k in report.step_diffs else "  "
            a_cut = a if len(a) <= width else a[: width - 1] + "~"
            lines.append(f"{k:>5}{mark}{a_cut:<{width}} | {b}")
        for f, (a, b) in report.step_diffs[first].items():
            lines.append(f"  step {first} {f}: {report.engine}={a} kvsched={b}")
    hit_diffs = [(rid, d) for rid, d in report.request_diffs.items()
                 if any(f in d for f in HIT_FIELDS)]
    if hit_diffs:
        rid, diff = hit_diffs[0]
        cells = ", ".join(f"{f} {report.engine}={diff[f][0]} kvsched={diff[f][1]}"
                          for f in HIT_FIELDS if f in diff)
        lines.append(f"  first hit disagreement: request {rid}: {cells}")
    for rid, diff in list(report.request_diffs.items())[:10]:
        cells = ", ".join(f"{f} {report.engine}={a} kvsched={b}" for f, (a, b) in diff.items())
        lines.append(f"  request {rid}: {cells}")
    if len(report.request_diffs) > 10:
        lines.append(f"  ... {len(report.request_diffs) - 10} more requests differ")
    return "\n".join(lines)


def resolve(spec: str) -> KvschedFn:
    module, _, attr = spec.partition(":")
    fn = getattr(importlib.import_module(module), attr or "vllm_v1_decisions")
    if not callable(fn):
        raise TypeError(f"{spec} is not callable")
    return fn  # type: ignore[no-any-return, unused-ignore]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("records", nargs="+", help="recorded JSON files or directories of them")
    ap.add_argument("--kvsched", default=DEFAULT_KVSCHED,
                    help="MODULE:CALLABLE producing kvsched's decisions "
                         f"(default {DEFAULT_KVSCHED})")
    ap.add_argument("--self", action="store_true",
                    help="compare each record with itself (checks the harness, not kvsched)")
    ap.add_argument("--strict-order", action="store_true")
    ap.add_argument("--context", type=int, default=3)
    ap.add_argument("--quiet", action="store_true", help="one line per workload")
    ap.add_argument("--allow-missing", action="store_true",
                    help="exit 0 with a notice when the kvsched callable cannot be imported")
    args = ap.parse_args(argv)

    fn: KvschedFn | None = None
    if not args.self:
        try:
            fn = resolve(args.kvsched)
        except (ImportError, AttributeError) as e:
            msg = (f"kvsched side {args.kvsched!r} is not available ({e}); "
                   "the vllm_v1 preset does not exist yet. Records were not compared.")
            print(msg, file=sys.stderr)
            return 0 if args.allow_missing else 2

    paths = record_paths(args.records)
    agree = 0
    steps_agree = steps_total = reqs_agree = reqs_total = hits_agree = hits_total = 0
    for path in paths:
        record = load(path)
        side = recorded_decisions(record) if fn is None else fn
        try:
            rep = compare(record, side, strict_order=args.strict_order, name=path.stem)
        except Exception as e:  # a crash in the kvsched side is a disagreement
            print(f"{path.stem}: kvsched raised {type(e).__name__}: {e}")
            continue
        agree += rep.agrees
        steps_agree += rep.steps_agree
        steps_total += rep.steps_total
        reqs_agree += rep.requests_agree
        reqs_total += rep.requests_total
        hits_agree += rep.hits_agree
        hits_total += rep.hits_total
        print(rep.summary())
        if not rep.agrees and not args.quiet:
            print(side_by_side(rep, args.context))
    print(f"\n{agree}/{len(paths)} workloads agree 100%; steps {steps_agree}/{steps_total}, "
          f"requests {reqs_agree}/{reqs_total}"
          + (f", hits {hits_agree}/{hits_total}" if hits_total else ""))
    return 0 if agree == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
