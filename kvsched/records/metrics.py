"""The summary of a run: counts, latency percentiles, throughput, preemption and memory.

Rates: `tokens_per_step` = generated tokens / steps; `busy_tokens_per_step` also counts the
prefill and recomputed tokens the steps computed; `busy_fraction` = time spent in steps /
`duration` (the end of the last step); `throughput` = generated tokens / `duration`.

Percentiles interpolate linearly (numpy's default) over the requests that have the value:
TTFT over requests with a first token, e2e over finished ones, token gap over requests with
at least two tokens. A figure with no data is None.

vLLM's benchmark figures (`vllm bench serve`), in the run's time unit rather than ms:
`tpot_*` over finished requests of at least two tokens (requests.csv's `tpot`); `itl_*`
over every inter-token gap of every request (`GapHistogram`: percentiles exact up to 4096
distinct gap values, then within 0.5% relative; mean exact); `ttft_p90`, `e2e_p90`,
`e2e_p95` complete the TTFT and e2e sets. `request_throughput` = finished requests /
`duration` (as `requests_per_time`); `output_throughput` = output tokens of finished
requests / `duration` (vLLM counts completed requests only; `throughput` counts every
generated token); `total_token_throughput` adds their prompt tokens; `request_goodput` =
`goodput` under vLLM's name. With a hardware time model, `mfu_mean` and `mbu_mean` are
the means over steps of steps.csv's `mfu` and `mbu` (None otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsched.histogram import GapHistogram
from kvsched.quantile import percentiles
from kvsched.records.rows import RequestRecord
from kvsched.records.slo import Slo
from kvsched.records.steplog import StepStats
from kvsched.records.table import STATUS_CODE, STATUSES, Columns, columns_of

LATE_KEYS = (
    "ttft_p90", "tpot_mean", "tpot_p50", "tpot_p90", "tpot_p95", "tpot_p99",
    "itl_mean", "itl_p50", "itl_p90", "itl_p95", "itl_p99", "e2e_p90", "e2e_p95",
    "request_throughput", "output_throughput", "total_token_throughput", "request_goodput",
    "mfu_mean", "mbu_mean", "prefix_hit_rate", "prefill_tokens_saved", "evicted_blocks",
)
"""Summary keys added after summary.csv's layout was in use: `summary_rows` writes them
after every other column (per-class and incident keys included), so older columns keep
their places."""

SUMMARY_KEYS = (
    "num_requests", "num_finished", "num_starved", "num_unfinished", "num_rejected",
    "num_steps", "duration",
    "ttft_mean", "ttft_p50", "ttft_p95", "ttft_p99",
    "ttft_steps_mean", "ttft_steps_p50", "ttft_steps_p95", "ttft_steps_p99",
    "e2e_mean", "e2e_p50", "e2e_p99", "queue_time_p50", "queue_time_p99",
    "token_gap_p50", "token_gap_p99", "token_gap_max",
    "tokens_per_step", "busy_tokens_per_step", "busy_fraction", "throughput",
    "requests_per_time",
    "num_preemptions", "recomputed_tokens", "generated_tokens", "recompute_ratio",
    "prefill_tokens", "decode_tokens", "swapped_blocks",
    "peak_blocks_used", "mean_blocks_used", "final_blocks_used",
    "thrash_ratio_max", "backpressure_steps",
    "num_slo_met", "slo_attainment", "goodput",
    *LATE_KEYS,
)
"""Every run's summary has these keys; runs whose requests carry classes add, per class C,
`num_requests_C`, `num_starved_C`, `ttft_mean_C`, `ttft_p50_C`, `ttft_p99_C`."""

CLASS_KEYS = ("num_requests", "num_starved", "ttft_mean", "ttft_p50", "ttft_p99")

CLUSTER_KEYS = (
    "num_replicas", "replica_requests_min", "replica_requests_max", "replica_load_imbalance",
    "replica_ttft_p99_min", "replica_ttft_p99_max", "replica_ttft_p99_ratio",
    "replica_busy_fraction_min", "replica_busy_fraction_max", "max_queue_while_idle",
    "incident_imbalance",
)
"""Summary keys a cluster run adds (after SUMMARY_KEYS, before `replicas`).
`replica_load_imbalance` = the most requests routed to one replica / the mean per replica
(1 = perfectly even); `replica_ttft_p99_ratio` = highest / lowest replica p99 TTFT;
`max_queue_while_idle` = the longest queue one replica had at an arrival while another
replica had nothing queued or running; `incident_imbalance` is the diagnosis flag."""

PD_KEYS = ("num_prefill_replicas", "num_decode_replicas", "num_split", "num_transferred",
           "transfer_bytes", "transfer_time_mean", "transfer_time_p50", "transfer_time_p99",
           "transfer_time_max")
"""A P/D run's summary keys (before `replicas`): the pools' sizes, the requests prefilled on
the prefill pool (`num_split`) and those whose KV reached a decode instance, the bytes moved,
and the transfer times (from the prefill's end to the delivery, latency and fixed costs
included; in seconds)."""

OFFLOAD_KEYS = ("host_hit_rate", "total_hit_rate", "host_loaded_tokens", "host_loaded_blocks",
                "host_stored_blocks", "host_dropped_blocks")
"""A run with a host tier (`engine.kv_offload`) adds these after the other keys (before a
cluster's `replicas`): `host_hit_rate` = prompt tokens read back from host at first
admissions / their prompt tokens (`prefix_hit_rate`'s denominator: the GPU tier's rate),
`total_hit_rate` = the two tiers' sum; `host_loaded_tokens` over every admission; blocks
read back, written to host (a block already there is only refreshed) and pushed out of it."""


def host_summary(summary: dict[str, Any], requests: Sequence[RequestRecord],
                 counts: Sequence[tuple[int, int, int, int, int]]) -> dict[str, Any]:
    """`summary` with OFFLOAD_KEYS from the engines' host counts (`Engine.host_counts`),
    inserted before a cluster's `replicas`."""
    first = loaded = stored = dropped = blocks = 0
    for f, t, s, d, b in counts:
        first, loaded, stored, dropped, blocks = (first + f, loaded + t, stored + s,
                                                  dropped + d, blocks + b)
    c = columns_of(requests)
    prompts = int(c.prompt_len[c.prefix_hit_tokens >= 0].sum())  # those admitted
    replicas = summary.pop("replicas", None)
    host_rate = first / prompts if prompts else 0.0
    summary |= {"host_hit_rate": host_rate,
                "total_hit_rate": summary["prefix_hit_rate"] + host_rate,
                "host_loaded_tokens": loaded, "host_loaded_blocks": blocks,
                "host_stored_blocks": stored, "host_dropped_blocks": dropped}
    if replicas is not None:
        summary["replicas"] = replicas
    return summary


_FINISHED = STATUS_CODE["finished"]


def _stats(values: np.ndarray, prefix: str, quantiles: Sequence[int],
           mean: bool = True) -> dict[str, float | None]:
    """Mean and percentiles of the values that are there (NaN, or -1 in an int column, is
    none)."""
    if values.dtype.kind == "f":
        data = values[~np.isnan(values)]
    else:
        data = values[values >= 0].astype(float)
    out: dict[str, float | None] = {}
    if mean:
        out[f"{prefix}_mean"] = float(data.mean()) if data.size else None
    values_at = percentiles(data, quantiles) if data.size else [None] * len(quantiles)
    for q, value in zip(quantiles, values_at, strict=True):
        out[f"{prefix}_p{q}"] = value
    return out


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _vllm_figures(c: Columns, duration: float, itl: GapHistogram | None) -> dict[str, Any]:
    """The keys vLLM's benchmark reports that the older keys do not already hold."""
    out = _stats(c.ttft, "ttft", (90,), mean=False)
    out |= _stats(c.tpot, "tpot", (50, 90, 95, 99))
    out["itl_mean"] = None if itl is None else itl.mean
    for q in (50, 90, 95, 99):
        out[f"itl_p{q}"] = None if itl is None else itl.percentile(q)
    out |= _stats(c.e2e_latency, "e2e", (90, 95), mean=False)
    finished = c.status == _FINISHED
    output = int(c.output_len[finished].sum())
    out["request_throughput"] = _ratio(int(finished.sum()), duration)
    out["output_throughput"] = _ratio(output, duration)
    out["total_token_throughput"] = _ratio(output + int(c.prompt_len[finished].sum()),
                                           duration)
    return out


def slo_met(c: Columns, slo: Slo) -> np.ndarray:
    """Which requests finished within every target (`Slo.met`, a column at a time)."""
    ok = c.status == _FINISHED
    if slo.ttft is not None:
        ok &= c.ttft <= slo.ttft  # NaN compares False: no first token, no goodput
    if slo.e2e is not None:
        ok &= c.e2e_latency <= slo.e2e
    if slo.tpot is not None:
        ok &= np.isnan(c.tpot) | (c.tpot <= slo.tpot)
    return ok


def summarize(requests: Sequence[RequestRecord], steps: StepStats | list[tuple],
              slo: Slo | None = None, final_blocks_used: int = 0,
              itl: GapHistogram | None = None) -> dict[str, Any]:
    """The summary keys (SUMMARY_KEYS, then per-class keys) of one run's records.

    `requests`: a `RecordTable` or a list of records. `steps`: the run's step sums
    (`StepStats`), or its STEP_COLUMNS rows.
    With an `slo`, goodput counts finished requests within all its TTFT, TPOT and e2e
    targets: `num_slo_met`, `slo_attainment` (share of all requests), `goodput` (per time
    unit). `itl`: the run's inter-token gaps (without it the `itl_*` keys are None).
    """
    if not isinstance(steps, StepStats):
        stats = StepStats()
        if steps:
            stats.add_rows(steps)
        steps = stats
    c = columns_of(requests)
    num_steps = steps.num_steps
    counts = np.bincount(c.status, minlength=len(STATUSES))
    summary: dict[str, Any] = {
        "num_requests": len(requests),
        "num_finished": int(counts[STATUS_CODE["finished"]]),
        "num_starved": int(counts[STATUS_CODE["starved"]]),
        "num_unfinished": int(counts[STATUS_CODE["unfinished"]]),
        "num_rejected": int(counts[STATUS_CODE["rejected"]]),
        "num_steps": num_steps,
    }
    duration = steps.end if num_steps else 0.0
    summary["duration"] = duration
    summary |= _stats(c.ttft, "ttft", (50, 95, 99))
    summary |= _stats(c.ttft_steps, "ttft_steps", (50, 95, 99))
    summary |= _stats(c.e2e_latency, "e2e", (50, 99))
    summary |= _stats(c.queue_time, "queue_time", (50, 99), mean=False)
    gaps = c.max_token_gap[~np.isnan(c.max_token_gap)]
    summary |= _stats(gaps, "token_gap", (50, 99), mean=False)
    summary["token_gap_max"] = float(gaps.max()) if gaps.size else None

    generated = int(c.generated_tokens.sum())
    prefill = steps.prefill_tokens
    decode = steps.decode_tokens
    recomputed = steps.recomputed_tokens
    summary["tokens_per_step"] = _ratio(generated, num_steps)
    summary["busy_tokens_per_step"] = _ratio(prefill + decode + recomputed, num_steps)
    summary["busy_fraction"] = _ratio(steps.busy_time, duration)
    summary["throughput"] = _ratio(generated, duration)
    summary["requests_per_time"] = _ratio(summary["num_finished"], duration)
    summary["num_preemptions"] = int(c.num_preemptions.sum())
    summary["recomputed_tokens"] = recomputed
    summary["generated_tokens"] = generated
    summary["recompute_ratio"] = recomputed / generated if generated else 0.0
    summary["prefill_tokens"] = prefill
    summary["decode_tokens"] = decode
    summary["swapped_blocks"] = steps.swapped_blocks
    summary["peak_blocks_used"] = steps.peak_blocks_used
    summary["mean_blocks_used"] = steps.blocks_used_sum / num_steps if num_steps else 0.0
    summary["final_blocks_used"] = final_blocks_used  # blocks still held when the run ended
    summary["thrash_ratio_max"] = steps.thrash_ratio_max
    summary["backpressure_steps"] = steps.backpressure_steps
    met = int(slo_met(c, slo).sum()) if slo is not None and slo.is_set else None
    summary["num_slo_met"] = met
    summary["slo_attainment"] = None if met is None else _ratio(met, len(requests))
    summary["goodput"] = None if met is None else _ratio(met, duration)
    summary |= _vllm_figures(c, duration, itl)
    summary["request_goodput"] = summary["goodput"]
    for name, total in (("mfu", steps.mfu_sum), ("mbu", steps.mbu_sum)):
        summary[f"{name}_mean"] = None if total is None or not num_steps else total / num_steps
    admitted = c.prefix_hit_tokens >= 0
    prompts = int(c.prompt_len[admitted].sum())
    summary["prefix_hit_rate"] = (int(c.prefix_hit_tokens[admitted].sum()) / prompts
                                  if prompts else 0.0)
    summary["prefill_tokens_saved"] = int(c.cached_tokens.sum())
    summary["evicted_blocks"] = steps.evicted_blocks

    for name in sorted(set(c.class_names)):
        members = np.isin(c.class_codes, [k for k, n in enumerate(c.class_names) if n == name])
        if not members.any():
            continue  # a class no request drew
        summary[f"num_requests_{name}"] = int(members.sum())
        summary[f"num_starved_{name}"] = int((c.status[members]
                                              == STATUS_CODE["starved"]).sum())
        class_stats = _stats(c.ttft[members], "ttft", (50, 99))
        for key, value in class_stats.items():
            summary[f"{key}_{name}"] = value
    return summary

