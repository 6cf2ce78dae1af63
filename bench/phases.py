"""Where one `kvsched run` process spends its time, phase by phase, least and median of N
fresh processes (`python bench/phases.py SCENARIO [--repeat N] [--baseline DIR]
[--dataclasses] [--records MODE]`).

Phases: the interpreter's start (to the first line of the child), importing the CLI, the
runner and the scenario loader, then each of the command's own steps (the CLI's parsing
falls in `load_scenario`), and the exit: from the command's end (`_leave`, or `sys.exit`
in older code) to the parent's `wait`. `--baseline DIR` also runs the kvsched of an older
checkout (`git worktree add DIR COMMIT`), interleaved round by round. `--dataclasses` also
times every dataclass made in the process (Python 3.11 compiles each generated method
apart), summed by package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# The child, as `python -c` code: a module of this folder imported by it would count as the
# user's code, and the command would take the slow exit for it (`kvsched.cli.commands._leave`).
CHILD = """
import json, sys, time
marks = [("start", time.time())]
scenario, out, marks_file, dataclasses_too, records = sys.argv[1:6]
totals = {}
if dataclasses_too == "1":
    import dataclasses
    process = dataclasses._process_class
    def timed(cls, *args, **kwargs):
        began = time.perf_counter()
        made = process(cls, *args, **kwargs)
        package = cls.__module__.split(".")[0]
        totals[package] = totals.get(package, 0.0) + time.perf_counter() - began
        totals[package + " (classes)"] = totals.get(package + " (classes)", 0) + 1
        return made
    dataclasses._process_class = timed
import kvsched.cli.commands as cli
marks.append(("import cli", time.time()))
import kvsched.runner as runner
import kvsched.scenario as loader
marks.append(("import runner", time.time()))
def wrap(module, name):
    real = getattr(module, name)
    def wrapper(*args, **kwargs):
        value = real(*args, **kwargs)
        marks.append((name, time.time()))
        return value
    setattr(module, name, wrapper)
for name in ("prepare", "run_scenario", "write_scenario"):
    wrap(runner, name)
wrap(loader, "load_scenario")
wrap(cli, "render_run")
def save():
    marks.append(("end", time.time()))
    with open(marks_file, "w") as handle:
        json.dump({"marks": marks, "dataclasses": totals}, handle)
leave = getattr(cli, "_leave", None)
if leave is not None:
    def leaving(code):
        save()
        leave(code)
    cli._leave = leaving
else:  # older code ends with sys.exit
    real_exit = sys.exit
    def exiting(code=None):
        save()
        real_exit(code)
    sys.exit = exiting
sys.argv = ["kvsched", "run", scenario, "--out", out, "--no-check", "--records", records]
cli.main()
"""


def measure(scenario: Path, baseline: Path | None, dataclasses_too: bool,
            records: str = "full") -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        marks_file = os.path.join(scratch, "marks.json")
        command = [sys.executable, "-c", CHILD, str(scenario), os.path.join(scratch, "out"),
                   marks_file, "1" if dataclasses_too else "0", records]
        env = dict(os.environ)
        if baseline is not None:
            env["PYTHONPATH"] = str(baseline)
        began = time.time()
        subprocess.run(command, check=True, capture_output=True, env=env,
                       cwd=baseline or ROOT)
        ended = time.time()
        with open(marks_file) as handle:
            saved = json.load(handle)
    marks = [("spawn", began), *saved["marks"], ("exit", ended)]
    phases = {"python": marks[1][1] - marks[0][1]}
    for (_, before), (name, at) in zip(marks[1:], marks[2:], strict=False):
        phases[name] = phases.get(name, 0.0) + at - before
    phases["total"] = ended - began
    return {"phases": phases, "dataclasses": saved["dataclasses"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--baseline", type=Path, metavar="DIR")
    parser.add_argument("--dataclasses", action="store_true")
    parser.add_argument("--records", default="full",
                        help="the run's --records mode (the issue-21 bench cases: compact)")
    args = parser.parse_args()
    codes = {"current": None}
    if args.baseline is not None:
        codes = {"baseline": args.baseline.resolve(), "current": None}
    runs: dict[str, list[dict]] = {code: [] for code in codes}
    for _ in range(args.repeat):
        for code, tree in codes.items():  # interleaved: a noisy machine hits both alike
            runs[code].append(measure(args.scenario.resolve(), tree, args.dataclasses,
                                      args.records))
    for code, measured in runs.items():
        print(f"== {code} ({len(measured)} runs): least and median, ms")
        names = list(measured[0]["phases"])
        for name in names:
            values = sorted(1000 * m["phases"].get(name, 0.0) for m in measured)
            print(f"  {name:16s} {values[0]:8.1f} {statistics.median(values):8.1f}")
        if args.dataclasses:
            totals = measured[0]["dataclasses"]
            packages = sorted({k for k in totals if not k.endswith(" (classes)")},
                              key=lambda k: -totals[k])
            for package in packages:
                least = min(1000 * m["dataclasses"].get(package, 0.0) for m in measured)
                count = int(totals[package + " (classes)"])
                print(f"  dataclasses of {package:14s} {count:3d} made in {least:6.1f} ms")


if __name__ == "__main__":
    main()
