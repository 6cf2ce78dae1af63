"""`make bench` (part): how big report.html gets and how fast it opens and zooms in headless
Chromium, written to results/bench_report.csv.

    .venv/bin/python bench/report_open.py [--repeat N] [--cases a,b]

Cases: `pool60` (scenarios/pool60.yaml, 4 variants), `azure-full` and `azure-compact` (the
Azure 2023 conversation hour of bench_engine.py's cmd-azure-full case, 881,084 steps, with
`--records full` and `compact`), `hardware` (scenarios/hardware.yaml: the Azure hour on six
roofline engines, 1.2M steps in all). Each is run once (`kvsched run ... --report`), then
measured: `write_s` (`kvsched report FOLDER` as a process, best of --repeat), the file's
size, and in a fresh tab of one headless Chromium (tests/headless.py), best of --repeat:
`open_s` (navigation start to the first variant's timeline, Gantt and histograms drawn, as
the page's own clock says), `zoom_in_s` (to a thousandth of the run around its middle,
through the next frame), `zoom_out_s` (back to the whole run) and `switch_s` (to the last
variant: a variant's columns are inflated when it is first shown). Also the trace of a
minute (`--trace-out --trace-window`, the middle minute of the run): its events, size and
seconds. Times are wall clock on a machine that may be shared: compare runs of one sitting.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_engine import command_scenario  # noqa: E402
from headless import Browser, chromium_path  # noqa: E402

KVSCHED = Path(sys.executable).with_name("kvsched")
SCRATCH = ROOT / "results" / "bench-scratch" / "report"
CASES = ("pool60", "azure-full", "azure-compact", "hardware")
FIELDS = ("case", "steps", "variants", "report_bytes", "write_s", "open_s", "zoom_in_s",
          "zoom_out_s", "switch_s", "trace_window", "trace_events", "trace_bytes", "trace_s",
          "machine")


def scenario_of(case: str) -> tuple[Path, list[str]]:
    if case == "pool60":
        return ROOT / "scenarios" / "pool60.yaml", []
    if case == "hardware":
        return ROOT / "scenarios" / "hardware.yaml", []
    return command_scenario("cmd-azure-full"), ["--records", case.split("-")[1],
                                                 "--set", f"name=report_{case.replace('-', '_')}"]


def kvsched(*args: object) -> float:
    began = time.monotonic()
    subprocess.run([str(KVSCHED), *map(str, args)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - began


def measure(case: str, repeat: int, browser: Browser) -> dict[str, object]:
    scenario, options = scenario_of(case)
    kvsched("run", scenario, "--out", SCRATCH, "--no-check", "--report", *options)
    name = next(o.split("=", 1)[1] for o in options if o.startswith("name=")) if options \
        else scenario.stem
    folder = SCRATCH / name
    write = min(kvsched("report", folder) for _ in range(repeat))
    page_path = folder / "report.html"
    steps = 0
    variants = [line.split(",")[0] for line in (folder / "summary.csv").read_text().splitlines()
                [1:]]
    for variant in variants:
        with (folder / variant / "steps.csv").open() as handle:
            header = handle.readline().rstrip("\n").split(",")
            if "num_steps" in header:
                at = header.index("num_steps")
                steps += sum(int(line.split(",")[at]) for line in handle)
            else:
                steps += sum(1 for _ in handle)
    opens, zoom_ins, zoom_outs, switches = [], [], [], []
    for _ in range(repeat):
        page = browser.open(page_path)
        page.wait_for("document.body.dataset.ready === '1'", timeout=120)
        opens.append(float(page.evaluate("document.body.dataset.readyMs")) / 1000)
        end = page.evaluate("window.kvschedReport.state.x1")
        middle, width = end / 2, end / 1000
        zoom_ins.append(timed(page, f"window.kvschedReport.zoom({middle - width / 2}, "
                                    f"{middle + width / 2})"))
        zoom_outs.append(timed(page, f"window.kvschedReport.zoom(0, {end})"))
        switches.append(timed(page, f"window.kvschedReport.variant({len(variants) - 1})"))
        errors = page.errors
        if errors:
            raise SystemExit(f"{case}: console errors: {errors[:3]}")
        page.close()
    trace_path = SCRATCH / f"{name}-trace.json"
    window = f"{end / 2 - 30:.6g}..{end / 2 + 30:.6g}" if end > 120 else f"0..{end:.6g}"
    trace_s = kvsched("report", folder, "--trace-out", trace_path, "--trace-window", window)
    events = json.loads(trace_path.read_text())["otherData"]["num_events"]
    return {"case": case, "steps": steps, "variants": len(variants),
            "report_bytes": page_path.stat().st_size, "write_s": round(write, 3),
            "open_s": round(min(opens), 3), "zoom_in_s": round(min(zoom_ins), 3),
            "zoom_out_s": round(min(zoom_outs), 3), "switch_s": round(min(switches), 3),
            "trace_window": window,
            "trace_events": events, "trace_bytes": trace_path.stat().st_size,
            "trace_s": round(trace_s, 3),
            "machine": f"{platform.machine()} Python {platform.python_version()}"}


def timed(page, call: str) -> float:
    """Seconds, by the page's clock, from the call to the frame after its drawing."""
    return float(page.evaluate(
        "(async () => { const t = performance.now(); await " + call + ";"
        " await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));"
        " return (performance.now() - t) / 1000; })()"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_report.csv")
    args = parser.parse_args()
    if chromium_path() is None:  # make bench's engine figures stand without it
        print("bench/report_open.py: skipped: no chromium on the PATH (apt-get install "
              "chromium)")
        return
    SCRATCH.mkdir(parents=True, exist_ok=True)
    rows = []
    with Browser(timeout=300) as browser:
        for case in args.cases.split(","):
            row = measure(case, args.repeat, browser)
            rows.append(row)
            print("  ".join(f"{k}={row[k]}" for k in FIELDS if k != "machine"), flush=True)
    with args.out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
