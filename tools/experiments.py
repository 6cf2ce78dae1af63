"""`make experiments`: every shipped scenario run with its pictures and report.html, JOBS at
a time.

    .venv/bin/python tools/experiments.py [--jobs N] [--out DIR] SCENARIO.yaml ...

Each scenario is one `kvsched run SCENARIO --out DIR --plot --report` process; two of them
keep two cores busy (most of the work is drawing the pictures, one core per process). A
scenario's report (its table, diagnosis, checks and the path of each PNG and of its
report.html) is printed whole as soon as it is done, so reports never interleave; the
heartbeat lines a long run writes off a terminal are left out of it (they said what a run
was doing while it ran). The exit
status is the first failing scenario's (1: a check failed, 2: bad input), else 0.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

KVSCHED = Path(sys.executable).with_name("kvsched")
HEARTBEAT = re.compile(r"^kvsched run: .*\(\d+ (s|min \d+ s|h \d+ min)\)$")


def run(scenario: str, out: str) -> tuple[str, int, str, float]:
    """One scenario: its name, exit status, report (stdout then stderr) and seconds."""
    began = time.monotonic()
    done = subprocess.run([str(KVSCHED), "run", scenario, "--out", out, "--plot", "--report"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    notes = [line for line in done.stderr.splitlines() if not HEARTBEAT.match(line)]
    report = done.stdout + "".join(f"{line}\n" for line in notes)
    return scenario, done.returncode, report, time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="results")
    args = parser.parse_args()
    began = time.monotonic()
    failed: list[tuple[str, int]] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        running = [pool.submit(run, scenario, args.out) for scenario in args.scenarios]
        for future in as_completed(running):
            scenario, code, report, took = future.result()
            sys.stdout.write(report)
            print(f"-- {scenario}: {'ok' if code == 0 else f'exit {code}'} ({took:.0f} s)\n",
                  flush=True)
            if code:
                failed.append((scenario, code))
    print(f"{len(args.scenarios)} scenarios in {time.monotonic() - began:.0f} s, "
          f"{args.jobs} at a time" + (f"; failed: {', '.join(s for s, _ in failed)}"
                                      if failed else ""))
    return failed[0][1] if failed else 0


if __name__ == "__main__":
    sys.exit(main())
