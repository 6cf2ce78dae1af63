"""`make bench`: how fast the engine replays traffic, with its records.

Workloads, all on one engine (budget 16384, 20,000 blocks of 16 tokens, 256 sequences, one
step = 25 ms), each in a fresh process (peak memory is its own; best of --repeat times):
- azure: the Azure 2023 conversation trace (19,366 requests, one hour; ~29 running);
- busy: 30,000 chat requests at 20 req/s (~140 running);
- synthetic-100k: 100,000 requests of Azure-like lengths at 20 req/s.
Each also as `<workload>-plain`: the same work through a plain Python step loop (the lesson's
loop touching every running request every step, recording nothing), the yardstick.

Prints requests/s and decode tokens/s simulated and peak memory, and writes them to
results/bench.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import resource
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_TRACE = ROOT / "scenarios/traces/AzureLLMInferenceTrace_conv.csv"
WORKLOADS = ("azure", "busy", "synthetic-100k")
CASES = tuple(f"{w}{suffix}" for w in WORKLOADS for suffix in ("", "-plain"))


def engine_config():
    from kvsched import EngineConfig

    return EngineConfig(max_num_batched_tokens=16384, max_num_seqs=256, block_size=16,
                        num_blocks=20_000)


def azure_requests():
    from kvsched.schema import TraceWorkload
    from kvsched.workload import build_requests

    path = SHIPPED_TRACE
    spec = TraceWorkload(kind="trace", format="azure", path=str(path))
    return build_requests(spec)


def synthetic_requests(num_requests: int, prompt_median: int, output_median: int):
    from kvsched.schema import SyntheticWorkload
    from kvsched.workload import build_requests

    spec = SyntheticWorkload.model_validate({
        "kind": "synthetic", "num_requests": num_requests,
        "arrival": {"kind": "poisson", "rate": 20},
        "prompt_len": {"kind": "lognormal", "median": prompt_median, "sigma": 0.8, "max": 14000},
        "output_len": {"kind": "lognormal", "median": output_median, "sigma": 0.9,
                       "max": 1000}})
    return build_requests(spec, seed=0)


def requests_for(workload: str):
    if workload == "azure":
        return azure_requests()
    if workload == "busy":
        return synthetic_requests(30_000, 400, 200)
    return synthetic_requests(100_000, 1020, 129)


def plain_loop(requests, budget=16384, block_size=16, num_blocks=20_000, max_seqs=256,
               step_time=0.025):
    """The lesson's scheduler as a plain loop: every running request touched every step."""
    arrivals = deque(sorted(requests, key=lambda r: r.arrival_time))
    waiting: deque = deque()
    running: list[list[int]] = []  # [prompt_len, output_len, generated, blocks]
    free = num_blocks
    watermark = num_blocks // 100
    now, steps, decoded = 0.0, 0, 0
    while arrivals or waiting or running:
        while arrivals and arrivals[0].arrival_time <= now:
            r = arrivals.popleft()
            waiting.append([r.prompt_len, r.output_len, 0, 0])
        left = budget
        for seq in running:
            if (seq[0] + seq[2] - 1) + 1 > seq[3] * block_size and free:
                seq[3] += 1
                free -= 1
            seq[2] += 1
            left -= 1
            decoded += 1
        while waiting and left > 0 and len(running) < max_seqs:
            seq = waiting[0]
            need = -(-seq[0] // block_size)
            if seq[0] > left or free - need < watermark:
                break
            waiting.popleft()
            free -= need
            seq[3] = need
            seq[2] = 1
            left -= seq[0]
            running.append(seq)
        kept = []
        for seq in running:
            if seq[2] >= seq[1]:
                free += seq[3]
            else:
                kept.append(seq)
        running = kept
        if not running and not waiting and arrivals:
            now = arrivals[0].arrival_time
            continue
        now += step_time
        steps += 1
    return steps, decoded


def run_case(case: str) -> dict:
    from kvsched import ConstantStep, simulate

    requests = requests_for(case.removesuffix("-plain"))
    start = time.perf_counter()
    if case.endswith("-plain"):
        steps, decoded = plain_loop(requests)
        finished = len(requests)
    else:
        result = simulate(requests, engine_config(), time_model=ConstantStep(0.025))
        steps = result.summary["num_steps"]
        decoded = result.summary["decode_tokens"]
        finished = result.summary["num_finished"]
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": case, "requests": len(requests), "finished": finished, "steps": steps,
            "decode_tokens": decoded, "seconds": round(seconds, 3),
            "requests_per_s": round(len(requests) / seconds),
            "decode_tokens_per_s": round(decoded / seconds),
            "peak_rss_mib": round(peak_mib, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    parser.add_argument("--only", choices=CASES, action="append", help="run only these cases")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench.csv")
    args = parser.parse_args()
    if args.case:  # child process: one measurement, as JSON
        print(json.dumps(run_case(args.case)))
        return
    rows = []
    for case in args.only or CASES:
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, __file__, "--case", case], check=True,
                                 capture_output=True, text=True).stdout
            runs.append(json.loads(out))
        best = min(runs, key=lambda r: r["seconds"])
        best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
        rows.append(best)
        print(f"{case:15} {best['seconds']:7.3f} s  {best['requests_per_s']:>9,} req/s  "
              f"{best['decode_tokens_per_s']:>12,} decode tok/s  {best['steps']:>9,} steps  "
              f"peak {best['peak_rss_mib']:.0f} MiB", flush=True)
    machine = f"{platform.machine()} Python {platform.python_version()}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["machine", *rows[0]])
        writer.writeheader()
        for row in rows:
            writer.writerow({"machine": machine.strip(), **row})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
