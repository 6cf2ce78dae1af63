"""`make bench`: how fast the engine replays traffic, with its records.

Two kinds of case, each in a fresh process (peak memory is its own; best of --repeat):

Whole commands (`kvsched run ... --records R`, timed as a process: start-up, trace reading,
simulation, CSV writing), on the engine of the speed issue (budget 2048, 256 sequences,
26,312 blocks of 16, chunked prefill, watermark 0, 3.9 ms constant steps):
- cmd-azure-full / cmd-azure-compact: the Azure 2023 conversation hour (881,084 steps);
- cmd-azure25-full: the same hour at 25 ms steps (the old shipped assumption);
- cmd-1m-compact: 1,000,000 synthetic requests at 20 req/s, Azure-like lengths;
- cmd-100k-compact: 100,000 such requests (the 1M case's costs, a tenth of its time);
- cmd-tight-full: the Azure hour on a 600-block pool: many preemptions, the exact path;
- cmd-10m-compact (only with --big): 10,000,000 synthetic requests;
- cmd-mooncake-compact / cmd-mooncake-nocache-compact: the whole Mooncake conversation trace
  (12,031 requests with prefix hashes, replayed at a quarter of its rate) under vLLM V1's
  rules with prefix caching on (off), 250,000 blocks, budget 8192, the H100 Llama-3.1-8B
  roofline;
- sweep200-j2 / sweep200-ray: `kvsched sweep` of pool60's baseline over 200 pool sizes
  (60..259 blocks), with -j 2 and with --backend ray (a local Ray, its start-up included);
  run once each.

The one-engine issue's cases (`--records compact`, FCFS, seed 0), the real engines:
- cmd-r1-compact: `{preset: vllm_v1, max_num_batched_tokens: 2048, max_num_seqs: 256,
  num_blocks: auto}` on the Llama-3.1-8B / H100 roofline (tp 1), the Azure conversation hour;
- cmd-r2-compact: `{preset: vllm_v1, num_blocks: 250000, max_num_batched_tokens: 8192,
  enable_prefix_caching: true}`, the same roofline, the whole Mooncake conversation trace at
  `time_scale: 4`;
- cmd-r3-compact: R2 under `{preset: sglang, num_blocks: 250000, max_num_batched_tokens:
  8192}` (its radix cache);
- cmd-r4-compact: the lesson engine (budget 2048, 256 sequences, 600 blocks of 16, watermark
  0, chunked, recompute, constant 3.9 ms steps) on the Azure hour: it preempts all hour;
- cmd-r5-compact: R1's engine on 4 replicas behind `least_outstanding`, the Azure hour at
  `time_scale: 0.25`;
- cmd-r2-1m-compact (once): 1,000,000 synthetic requests (the 1M case's lengths) under R2's
  engine, 8 shared system prompts of 1,024 tokens before 80% of them;
- capacity-hardware (once): `kvsched capacity scenarios/hardware.yaml --slo ttft_p99=1
  --slo e2e_p99=30 -j 2`.

Library cases (`kvsched.simulate` only, records kept in memory), on the first engine's
setup (budget 16384, 20,000 blocks of 16, 256 sequences, 25 ms steps):
- azure, busy (30,000 chat requests at 20 req/s, ~140 running), synthetic-100k; each also
  as `<workload>-plain`, a plain Python loop touching every running request every step and
  recording nothing: the yardstick.

Prints seconds (wall, best of --repeat), CPU seconds (user + system, the least of the
runs: steadier than wall time on a shared machine), steps, events, microseconds per event
and per step, and peak memory, and writes them to results/bench.csv. `--baseline DIR`
also times every case but the sweeps with the kvsched of an older checkout, interleaved
round by round with the current code.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_TRACE = ROOT / "scenarios/traces/AzureLLMInferenceTrace_conv.csv"
MOONCAKE_TRACE = ROOT / "scenarios/traces/mooncake_conversation_trace.jsonl"
WORKLOADS = ("azure", "busy", "synthetic-100k")
LIBRARY_CASES = tuple(f"{w}{suffix}" for w in WORKLOADS for suffix in ("", "-plain"))
COMMAND_CASES = ("cmd-azure-full", "cmd-azure-compact", "cmd-azure25-full", "cmd-tight-full",
                 "cmd-100k-compact", "cmd-1m-compact", "cmd-mooncake-compact",
                 "cmd-mooncake-nocache-compact", "cmd-r1-compact", "cmd-r2-compact",
                 "cmd-r3-compact", "cmd-r4-compact", "cmd-r5-compact", "cmd-r2-1m-compact")
BIG_CASES = ("cmd-10m-compact",)
ONCE_CASES = ("cmd-1m-compact", "cmd-r2-1m-compact", "capacity-hardware")  # measured once
ROOFLINE_CASES = ("azure-roofline", "azure-8.6ms")
# 200-point sweeps of pool60's baseline (num_blocks 60..259), once each: -j 2, Ray.
SWEEP_CASES = ("sweep200-j2", "sweep200-ray")
CAPACITY_CASES = ("capacity-hardware",)
CASES = (COMMAND_CASES + LIBRARY_CASES + ROOFLINE_CASES + SWEEP_CASES + CAPACITY_CASES
         + BIG_CASES)
SCRATCH = ROOT / "results" / "bench-scratch"

ISSUE_ENGINE = ("{max_num_batched_tokens: 2048, max_num_seqs: 256, block_size: 16, "
                "num_blocks: %d, watermark: 0, chunked_prefill: true, max_steps: 1000000000}")
SYNTHETIC = """
  kind: synthetic
  num_requests: %d
  arrival: {kind: poisson, rate: 20}
  prompt_len: {kind: lognormal, median: 1020, sigma: 0.8, max: 14000}
  output_len: {kind: lognormal, median: 129, sigma: 0.9, max: 1000}
"""
ROOFLINE = "{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm, tp: 1}"
V1_ENGINE = ("{preset: vllm_v1, max_num_batched_tokens: 2048, max_num_seqs: 256, "
             "num_blocks: auto}")
R2_ENGINE = ("{preset: vllm_v1, num_blocks: 250000, max_num_batched_tokens: 8192, "
             "enable_prefix_caching: true}")


def command_scenario(case: str) -> Path:
    """The scenario file of a whole-command case, written under results/bench-scratch/."""
    trace = SHIPPED_TRACE
    azure = f"{{kind: trace, format: azure, path: {trace}}}"
    blocks, step, workload = 26_312, 0.0039, azure
    if case == "cmd-azure25-full":
        step = 0.025
    elif case == "cmd-tight-full":
        blocks = 600
    elif case == "cmd-100k-compact":
        workload = SYNTHETIC % 100_000
    elif case == "cmd-1m-compact":
        workload = SYNTHETIC % 1_000_000
    elif case == "cmd-10m-compact":
        workload = SYNTHETIC % 10_000_000
    name = case.removeprefix("cmd-").replace("-", "_")
    text = (f"name: {name}\nseed: 0\nengine: {ISSUE_ENGINE % blocks}\npolicy: fcfs\n"
            f"time: {{kind: constant, step_time: {step}}}\nworkload: {workload}\n")
    mooncake = (f"{{kind: trace, format: mooncake, path: {MOONCAKE_TRACE}, "
                "time_scale: 4}")
    issue = {  # the one-engine issue's cases: (engine, time, workload, cluster)
        "cmd-r1-compact": (V1_ENGINE, ROOFLINE, azure, None),
        "cmd-r2-compact": (R2_ENGINE, ROOFLINE, mooncake, None),
        "cmd-r3-compact": ("{preset: sglang, num_blocks: 250000, max_num_batched_tokens: 8192}",
                           ROOFLINE, mooncake, None),
        "cmd-r4-compact": ("{max_num_batched_tokens: 2048, max_num_seqs: 256, block_size: 16, "
                           "num_blocks: 600, watermark: 0, chunked_prefill: true, "
                           "preemption: recompute}", "{kind: constant, step_time: 0.0039}",
                           azure, None),
        "cmd-r5-compact": (V1_ENGINE, ROOFLINE, azure.replace("}", ", time_scale: 0.25}"),
                           "{replicas: 4, router: least_outstanding}"),
        "cmd-r2-1m-compact": (R2_ENGINE, ROOFLINE, SYNTHETIC % 1_000_000 + "  system_prompts: "
                              "{groups: 8, prefix_len: 1024, share: 0.8}\n", None),
    }
    if case in issue:
        engine, time_model, workload, cluster = issue[case]
        text = (f"name: {name}\nseed: 0\nengine: {engine}\npolicy: fcfs\n"
                f"time: {time_model}\nworkload: {workload}\n")
        if cluster:
            text += f"cluster: {cluster}\n"
    if case.startswith("cmd-mooncake"):
        caching = "false" if "nocache" in case else "true"
        text = (f"name: {name}\nseed: 0\nengine: {{preset: vllm_v1, num_blocks: 250000, "
                f"max_num_batched_tokens: 8192, enable_prefix_caching: {caching}}}\n"
                "policy: fcfs\ntime: {kind: roofline, model: meta-llama/Llama-3.1-8B, "
                "gpu: h100-sxm}\n"
                f"workload: {{kind: trace, format: mooncake, path: {MOONCAKE_TRACE}, "
                "time_scale: 4}\n")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / f"{name}.yaml"
    path.write_text(text)
    return path


def run_command_case(case: str, baseline: Path | None = None) -> dict:
    """Time `kvsched run` as a whole process; steps and events from what it wrote.
    `baseline`: run the kvsched package of that checkout instead (its folder holds
    `kvsched/`; run from there, so that it comes first on the path)."""
    scenario = command_scenario(case)
    records = case.rsplit("-", 1)[1]
    out = SCRATCH / ("out-baseline" if baseline else "out")
    start = time.perf_counter()
    # (full records are the default: said only otherwise, so that code older than
    # `--records`, the issue's 7e0b5ed, runs the full cases as a baseline)
    choice = [] if records == "full" else ["--records", records]
    subprocess.run([sys.executable, "-m", "kvsched", "run", str(scenario), "--out", str(out),
                    *choice, "--no-check"], check=True, capture_output=True, cwd=baseline)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    peak_mib = usage.ru_maxrss / 1024
    folder = out / scenario.stem / "base"
    summary = json.loads((folder / "summary.json").read_text())
    with (folder / "events.csv").open() as handle:
        events = sum(1 for _ in handle) - 1
    return {"case": case, "requests": summary["num_requests"],
            "finished": summary["num_finished"], "steps": summary["num_steps"],
            "events": events, "decode_tokens": summary["decode_tokens"],
            "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3)} | _rates(
        summary["num_requests"], summary["decode_tokens"], seconds, summary["num_steps"],
        events) | {"peak_rss_mib": round(peak_mib, 1)}


def run_capacity_case(case: str, baseline: Path | None = None) -> dict:
    """Time `kvsched capacity scenarios/hardware.yaml` as a whole process."""
    out = SCRATCH / ("out-baseline" if baseline else "out")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvsched", "capacity",
                    str(ROOT / "scenarios/hardware.yaml"), "--slo", "ttft_p99=1", "--slo",
                    "e2e_p99=30", "-j", "2", "--out", str(out), "--name", case],
                   check=True, capture_output=True, cwd=baseline)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"case": case, "requests": 0, "finished": 0, "steps": 0, "events": 0,
            "decode_tokens": 0, "seconds": round(seconds, 3),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3)} | _rates(
                1, 0, seconds, 1, 0) | {"peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def run_sweep_case(case: str) -> dict:
    """Time `kvsched sweep` over 200 points as a whole process; sums from its summary.csv."""
    out = SCRATCH / "out"
    backend = ["--backend", "ray"] if case.endswith("-ray") else ["-j", "2"]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvsched", "sweep", str(ROOT / "scenarios/pool60.yaml"),
                    "--blocks", "60..259:+1", "--variant", "baseline", "--out", str(out),
                    "--name", case, *backend], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, peak_mib = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    with (out / f"sweep-{case}" / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    total = {key: sum(int(row[key]) for row in rows)
             for key in ("num_requests", "num_finished", "num_steps", "decode_tokens")}
    return {"case": case, "requests": total["num_requests"], "finished": total["num_finished"],
            "steps": total["num_steps"], "events": 0, "decode_tokens": total["decode_tokens"],
            "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3)} | _rates(
        total["num_requests"], total["decode_tokens"], seconds, total["num_steps"], 0) | {
            "peak_rss_mib": round(peak_mib, 1)}


def _rates(requests: int, decoded: int, seconds: float, steps: int, events: int) -> dict:
    return {"requests_per_s": round(requests / seconds),
            "decode_tokens_per_s": round(decoded / seconds),
            "us_per_step": round(seconds / max(1, steps) * 1e6, 3),
            "us_per_event": round(seconds / max(1, events) * 1e6, 2)}


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


def run_case(case: str, baseline: Path | None = None) -> dict:
    from kvsched import ConstantStep, simulate

    if case.startswith("cmd-"):
        return run_command_case(case, baseline)
    if case in SWEEP_CASES:
        return run_sweep_case(case)
    if case in CAPACITY_CASES:
        return run_capacity_case(case, baseline)
    requests = requests_for(case.split("-")[0] if case.startswith("azure") else
                            case.removesuffix("-plain"))
    time_model = ConstantStep(0.0086 if case == "azure-8.6ms" else 0.025)
    if case.endswith("-roofline"):  # the per-step cost of the hardware time model
        from kvsched.timing.roofline import RooflineStep

        time_model = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm")
    start, cpu_start = time.perf_counter(), time.process_time()
    events = 0
    if case.endswith("-plain"):
        steps, decoded = plain_loop(requests)
        finished = len(requests)
    else:
        result = simulate(requests, engine_config(), time_model=time_model)
        steps = result.summary["num_steps"]
        decoded = result.summary["decode_tokens"]
        finished = result.summary["num_finished"]
        events = len(result.events)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": case, "requests": len(requests), "finished": finished, "steps": steps,
            "events": events, "decode_tokens": decoded, "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu, 3)} | _rates(
        len(requests), decoded, seconds, steps, events) | {"peak_rss_mib": round(peak_mib, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    parser.add_argument("--only", choices=CASES, action="append", help="run only these cases")
    parser.add_argument("--big", action="store_true", help="also the 10M-request case")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench.csv")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="a checkout of older code (`git worktree add DIR COMMIT`): each "
                             "case but the sweeps also runs it, interleaved with the current "
                             "code, round by round (rows 'code: baseline')")
    args = parser.parse_args()
    if args.case:  # child process: one measurement, as JSON
        print(json.dumps(run_case(args.case, args.baseline)))
        return
    # Byte-compiled first, as a regular install is: with PYTHONDONTWRITEBYTECODE set (this
    # machine kind sets it), an editable install would compile every module at each start.
    for tree in [ROOT] + ([args.baseline.resolve()] if args.baseline is not None else []):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "kvsched")],
                       check=True, capture_output=True)
    rows = []
    cases = args.only or [c for c in CASES if args.big or c not in BIG_CASES]
    for case in cases:
        codes = ["current"]
        if args.baseline is not None and case not in SWEEP_CASES:
            codes = ["baseline", "current"]
        runs: dict[str, list[dict]] = {code: [] for code in codes}
        for _ in range(1 if case in BIG_CASES + ONCE_CASES + SWEEP_CASES else args.repeat):
            for code in codes:  # interleaved: a noisy machine hits both alike
                command = [sys.executable, __file__, "--case", case]
                env = None
                if code == "baseline":  # its kvsched first on the path (library cases)
                    command += ["--baseline", str(args.baseline.resolve())]
                    env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
                out = subprocess.run(command, check=True, capture_output=True, text=True,
                                     env=env).stdout
                runs[code].append(json.loads(out))
        for code in codes:
            best = min(runs[code], key=lambda r: r["seconds"])
            best["cpu_seconds"] = min(r["cpu_seconds"] for r in runs[code])
            best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs[code])
            best = {"code": code, **best}
            rows.append(best)
            label = case if code == "current" else f"{case} (baseline)"
            print(f"{label:31} {best['seconds']:8.3f} s  cpu {best['cpu_seconds']:7.3f} s  "
                  f"{best['steps']:>11,} steps  {best['events']:>10,} events  "
                  f"{best['us_per_step']:7.3f} us/step  {best['us_per_event']:7.2f} us/event  "
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
