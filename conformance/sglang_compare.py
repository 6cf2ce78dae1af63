"""Compare kvsched's `sglang` preset with a record of conformance/sglang_driver.py, or kvsched's
radix cache with a record of conformance/sglang_radix_driver.py.

    .venv/bin/python -m conformance.sglang_compare R.json [R.json ...] [--quiet]

Per round: the admitted requests with their token counts, the request left chunked, and the
batch-full latch. Ratio traces value by value (within 1e-12), retraction orders exactly. Per
radix operation, for each SGLang cache recorded: the insert's tokens already cached, the
match's tokens, the tokens evicted and the nodes (first depth, tokens, first token), the
evictable and locked tokens after it. Exit 1 on any disagreement. Stdlib and kvsched only: no
SGLang needed.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from kvsched.decisions import (
    sglang_priority_round_decisions,
    sglang_radix_outcomes,
    sglang_ratio_values,
    sglang_round_decisions,
)

RADIX_FORMAT = "kvsched-sglang-radix/1"

FIELDS = ("admitted", "chunked_next", "batch_is_full")
PRIORITY_FIELDS = ("admitted", "preempted", "batch_is_full")


def retraction_keep_order(requests: list[dict[str, Any]]) -> list[str]:
    """kvsched's victim order, reversed: the fewest generated, then the longest prompt, go
    first (kvsched's `fewest_generated` victim rule)."""
    ranked = sorted(requests, key=lambda r: (int(r["generated"]), -int(r["prompt_len"])),
                    reverse=True)
    return [r["id"] for r in ranked]


def compare_record(record: dict[str, Any]) -> dict[str, Any]:
    """Disagreements of one record: rounds, ratio values, retraction orders."""
    rounds = []
    for entry in record["rounds"]:
        ours = sglang_round_decisions(entry["config"], entry["state"])
        theirs = entry["sglang"]
        diff = {f: (theirs[f], ours[f]) for f in FIELDS if theirs[f] != ours[f]}
        if diff:
            rounds.append((entry["name"], diff))
    for entry in record.get("priority_rounds", []) + record.get("priority_tie_rounds", []):
        ours = sglang_priority_round_decisions(entry["config"], entry["state"])
        theirs = entry["sglang"]
        diff = {f: (theirs[f], ours[f]) for f in PRIORITY_FIELDS if theirs[f] != ours[f]}
        if diff:
            rounds.append((entry["name"], diff))
    ratios = []
    for trace in record["ratios"]:
        ours_v = sglang_ratio_values(trace["schedule_conservativeness"], trace["events"])
        for k, (a, b) in enumerate(zip(trace["values"], ours_v, strict=True)):
            if not math.isclose(a, b, rel_tol=0, abs_tol=1e-12):
                ratios.append((trace["schedule_conservativeness"], k, a, b))
                break
    retractions = [(r["keep_order"], retraction_keep_order(r["requests"]))
                   for r in record["retractions"]
                   if r["keep_order"] != retraction_keep_order(r["requests"])]
    ties = {entry["name"] for entry in record.get("priority_tie_rounds", [])}
    return {"rounds": len(record["rounds"]) + len(record.get("priority_rounds", []))
            + len(ties),
            "tie_rounds": len(ties),
            "tie_round_diffs": sum(name in ties for name, _diff in rounds),
            "round_diffs": rounds,
            "ratio_events": sum(len(t["events"]) for t in record["ratios"]),
            "ratio_diffs": ratios, "retractions": len(record["retractions"]),
            "retraction_diffs": retractions}


def compare_radix(record: dict[str, Any]) -> dict[str, Any]:
    """Per SGLang cache recorded: the cases and operations that agree with kvsched's
    `RadixCache`, and the first difference of each case that differs."""
    kinds = sorted({kind for case in record["cases"] for kind in case["sglang"]})
    report: dict[str, Any] = {kind: {"cases": 0, "cases_agree": 0, "ops": 0, "ops_agree": 0,
                                     "diffs": []} for kind in kinds}
    for case in record["cases"]:
        ours = sglang_radix_outcomes(case)
        for kind, theirs in case["sglang"].items():
            entry = report[kind]
            entry["cases"] += 1
            entry["ops"] += len(theirs)
            same = [a == b for a, b in zip(theirs, ours, strict=True)]
            entry["ops_agree"] += sum(same)
            if all(same):
                entry["cases_agree"] += 1
            else:
                k = same.index(False)
                entry["diffs"].append((case["name"], case["config"]["page_size"], k,
                                       case["ops"][k], theirs[k], ours[k]))
    return report


def _main_radix(path: str, record: dict[str, Any], quiet: bool) -> bool:
    report = compare_radix(record)
    ok = True
    for kind, entry in report.items():
        print(f"{path} [{kind}]: cases {entry['cases_agree']}/{entry['cases']} agree, "
              f"operations {entry['ops_agree']}/{entry['ops']}")
        if not quiet:
            for name, page, k, op, theirs, ours in entry["diffs"][:10]:
                print(f"  {name} (page {page}) op {k} {op}: sglang {theirs} kvsched {ours}")
        ok = ok and not entry["diffs"]
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    bad = 0
    for path in args.records:
        record = json.loads(Path(path).read_text())
        if record.get("format") == RADIX_FORMAT:
            bad += not _main_radix(path, record, args.quiet)
            continue
        report = compare_record(record)
        ok = report["rounds"] - len(report["round_diffs"])
        ties = ""
        if report["tie_rounds"]:
            ties = (f" (priority tie rounds {report['tie_rounds'] - report['tie_round_diffs']}"
                    f"/{report['tie_rounds']})")
        print(f"{path}: rounds {ok}/{report['rounds']} agree{ties}; ratio traces "
              f"{len(record['ratios']) - len(report['ratio_diffs'])}/{len(record['ratios'])} "
              f"({report['ratio_events']} events); retraction orders "
              f"{report['retractions'] - len(report['retraction_diffs'])}/{report['retractions']}")
        if not args.quiet:
            for name, diff in report["round_diffs"][:10]:
                print(f"  {name}: " + "; ".join(f"{f}: sglang {a} kvsched {b}"
                                                for f, (a, b) in diff.items()))
            for item in report["ratio_diffs"] + report["retraction_diffs"]:
                print(f"  {item}")
        bad += bool(report["round_diffs"] or report["ratio_diffs"] or report["retraction_diffs"])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
