"""`make bench`: the C text code kept beside pyarrow, measured against pyarrow's own path.

Issue 21 keeps hand-written C only for text I/O that no well-kept library does at that
speed. kvsched's C text code (`kvsched/_fastcore.c` through `kvsched.records.fastcsv`) does
two such jobs, and each has a pyarrow path that gives the same bytes (`KVSCHED_CORE=python`
takes it):
- writing `steps.csv` chunks: floats as `%.10g` (which Arrow's casts do not write: the Arrow
  path makes that text with numpy and Arrow kernels, `kvsched.records.floatfmt`), then
  Arrow's CSV writer;
- reading a clean trace's columns (the shipped Azure conversation trace).
Each is timed both ways in this process (least of --repeat), the two outputs compared byte
for byte (a difference fails the script), and pyarrow's import timed in a fresh process
(CPU, beyond numpy's): the C paths never import it. Prints the figures and writes
results/bench_text.csv.
"""

from __future__ import annotations

import argparse
import csv
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvsched.records import fastcsv
from kvsched.records.csvout import StepCsv
from kvsched.records.mode import RecordMode
from kvsched.records.steplog import COMPACT_COLUMNS
from kvsched.workload import trace_csv

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "scenarios/traces/AzureLLMInferenceTrace_conv.csv"
ROWS = 32_768  # a compact chunk's rows, about what a long run hands the writer at once
NUM_BLOCKS = 26_312


def compact_columns(n: int, seed: int = 0) -> list[Any]:
    """COMPACT_COLUMNS of `n` rows as a run makes them: step times of a few milliseconds
    summed into the clock, stretches of 1-60 steps, counts of a few hundred."""
    rng = np.random.default_rng(seed)
    steps = rng.integers(1, 60, n)
    duration = rng.uniform(0.003, 0.09, n) * steps
    time_ = np.concatenate(([0.0], np.cumsum(duration)[:-1])) + 0.0123
    first = np.concatenate(([0], np.cumsum(steps)[:-1]))
    ints = {name: rng.integers(0, 400, n) for name in COMPACT_COLUMNS}
    ints |= {"step": first, "num_steps": steps, "blocks_used": rng.integers(0, NUM_BLOCKS, n)}
    floats = {"time": time_, "duration": duration, "thrash_ratio": np.zeros(n)}
    return [floats[name] if name in floats else [None] * n if name in ("mfu", "mbu")
            else ints[name] for name in COMPACT_COLUMNS]


def least(run: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The least wall time of `repeat` calls, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def write_chunk(folder: Path, columns: list[Any], arrow: bool) -> bytes:
    """The chunk as steps.csv bytes, through C's formatter or Arrow's (the same file)."""
    path = folder / ("arrow.csv" if arrow else "c.csv")
    sink = StepCsv(path, RecordMode.COMPACT, NUM_BLOCKS)
    text = None if arrow else sink._text(columns)  # noqa: SLF001 - the two paths, apart
    if text is None:
        sink._write(columns)  # noqa: SLF001
    else:
        sink._write_header()  # noqa: SLF001
        sink._handle.write(text)  # noqa: SLF001
    sink.close()
    return path.read_bytes()


def import_seconds(module: str, repeat: int) -> float:
    """The least CPU time a fresh interpreter takes to import `module`, less one importing
    numpy alone (every kvsched run imports numpy)."""
    def cpu(code: str) -> float:
        best = float("inf")
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", code], check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            best = min(best, after.ru_utime + after.ru_stime - before.ru_utime
                       - before.ru_stime)
        return best
    return cpu(f"import numpy, {module}") - cpu("import numpy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench_text.csv")
    args = parser.parse_args()
    if not fastcsv.available():
        sys.exit("bench_text: the C extension is not built (or KVSCHED_CORE=python): "
                 "nothing to compare")
    rows = []
    columns = compact_columns(ROWS)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        c_s, c_bytes = least(lambda: write_chunk(folder, columns, False), args.repeat)
        a_s, a_bytes = least(lambda: write_chunk(folder, columns, True), args.repeat)
    if c_bytes != a_bytes:
        sys.exit("bench_text: C's and Arrow's steps.csv bytes differ")
    rows.append(("write compact steps.csv chunk", f"{ROWS} rows", c_s, a_s, len(c_bytes)))
    needed = {"TIMESTAMP": "datetime", "ContextTokens": "number",
              "GeneratedTokens": "number"}
    c_s, c_read = least(lambda: trace_csv._compiled_read(TRACE, needed), args.repeat)  # noqa: SLF001
    a_s, a_read = least(lambda: trace_csv._arrow_read(TRACE, needed), args.repeat)  # noqa: SLF001
    if c_read is None or a_read is None or any(
            not np.array_equal(c_read[1][name], a_read[1][name]) for name in needed):
        sys.exit("bench_text: C's and Arrow's trace columns differ")
    rows.append(("read the Azure conversation trace", f"{len(c_read[1]['TIMESTAMP'])} rows",
                 c_s, a_s, TRACE.stat().st_size))
    rows.append(("import pyarrow.csv (CPU, fresh process)", "-", 0.0,
                 import_seconds("pyarrow.csv", args.repeat), 0))
    print(f"{'job':38} {'size':>12} {'C (ms)':>9} {'pyarrow (ms)':>13} {'bytes':>11}")
    for job, size, c, a, size_bytes in rows:
        print(f"{job:38} {size:>12} {c * 1e3:9.1f} {a * 1e3:13.1f} {size_bytes:11,}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job", "size", "c_ms", "pyarrow_ms", "bytes"])
        writer.writerows([job, size, round(c * 1e3, 2), round(a * 1e3, 2), n]
                         for job, size, c, a, n in rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
