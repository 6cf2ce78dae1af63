"""An engine's defaults that depend on the GPU it runs on, as its server sets them.

`vllm serve` does not take `SchedulerConfig`'s 2048 tokens and 128 sequences: vLLM 0.33's
`EngineArgs.get_batch_defaults` picks them by the device's memory and name and by the usage
context (the API server or the offline `LLM` class). A preset carries that table as data
(`Preset.gpu_defaults`); this module applies it to a scenario's raw `engine:` mapping when
its time model names the GPU, under the keys written there, and says where each value came
from (`kvsched validate`, `run.json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from kvsched.engine_keys import written_engine_keys
from kvsched.presets import PRESETS, GpuTier

GIB = 2**30
BATCH_KEYS = ("max_num_batched_tokens", "max_num_seqs")
USAGES = ("serve", "offline")


class GpuDefaults(NamedTuple):
    """The values a GPU tier gives, and why (the GPU, the tier, the usage)."""

    values: Mapping[str, int]
    why: str


def device_memory(gpu: Any) -> float:
    """Bytes of memory the device reports (CUDA's total where the catalogue has it; vLLM
    reads NVML's, a few hundred MiB more, which moves no catalogued GPU across a tier)."""
    return float(gpu.device_memory)


def tier_for(tiers: tuple[GpuTier, ...], name: str, memory: float) -> GpuTier | None:
    """The first tier whose memory floor `memory` reaches and whose excluded names `name`
    does not contain (vLLM tests the device name case-insensitively)."""
    lowered = name.lower()
    for tier in tiers:
        if memory >= tier.min_gib * GIB and not any(word in lowered for word in tier.unless):
            return tier
    return None


def gpu_defaults(preset: str, gpu_name: str, usage: str = "serve") -> GpuDefaults | None:
    """`preset`'s batch defaults on `gpu_name` for `usage` (None when the preset has no such
    table or the GPU is unknown)."""
    # the hardware catalogues: only for a GPU's defaults
    from kvsched.timing.hardware import UnknownHardware, load_gpu

    entry = PRESETS.get(preset)
    if entry is None or not entry.gpu_defaults:
        return None
    try:
        gpu = load_gpu(gpu_name)
    except UnknownHardware:
        return None  # the time model's own validation names it
    memory = device_memory(gpu)
    tier = tier_for(entry.gpu_defaults, gpu.name, memory)
    if tier is None:
        return None
    context = "vllm serve's" if usage == "serve" else "the offline LLM class's"
    why = (f"{context} default on {gpu.name} ({memory / GIB:.1f} GiB: {tier.label}), "
           f"{entry.gpu_defaults_source}")
    return GpuDefaults(dict(tier.values[usage]), why)


def _gpu_of(time: Any) -> str | None:
    if isinstance(time, dict) and time.get("kind") in ("roofline", "profiled"):
        gpu = time.get("gpu")
        return gpu if isinstance(gpu, str) else None
    return None


def defaults_for(engine: Any, time: Any, base: Mapping[str, Any] | None = None
                 ) -> GpuDefaults | None:
    """The GPU defaults a raw `engine:` mapping under `time:` takes: its preset's table for
    the time model's GPU, for the keys neither it nor `base` (a fleet replica's variant
    engine) writes. None when nothing applies."""
    if not isinstance(engine, dict):
        return None
    merged = {**(base or {}), **engine}
    preset, gpu, usage = merged.get("preset", "lesson"), _gpu_of(time), merged.get("usage",
                                                                                   "serve")
    if not (isinstance(preset, str) and gpu is not None and usage in USAGES):
        return None
    written = {**written_engine_keys(base), **written_engine_keys(engine)}
    if all(key in written for key in BATCH_KEYS):
        return None
    found = gpu_defaults(preset, gpu, usage)
    if found is None:
        return None
    values = {k: v for k, v in found.values.items() if k not in written}
    limit = merged.get("max_model_len")
    if "max_num_batched_tokens" in values and isinstance(limit, int):
        # as vLLM: a default budget is at most max_num_seqs x max_model_len and, without
        # chunked prefill, at least max_model_len
        seqs = merged.get(written["max_num_seqs"]) if "max_num_seqs" in written else \
            found.values["max_num_seqs"]
        budget = values["max_num_batched_tokens"]
        if merged.get("chunked_prefill", merged.get("enable_chunked_prefill")) is False:
            budget = max(budget, limit)
        if isinstance(seqs, int):
            budget = min(budget, seqs * limit)
        values["max_num_batched_tokens"] = budget
    return GpuDefaults(values, found.why) if values else None


def with_defaults(engine: dict, time: Any, base: Mapping[str, Any] | None = None) -> dict:
    """`engine` with the GPU defaults it takes written in."""
    found = defaults_for(engine, time, base)
    return engine if found is None else {**engine, **found.values}


def derived_defaults(resolved: Mapping[str, Any]) -> dict[str, str]:
    """Where a variant's GPU defaults came from: `engine.max_num_seqs` (or
    `cluster.replicas[i].engine....`) -> 'N: why', for each value taken from a GPU table."""
    engine, out = resolved.get("engine"), {}
    found = defaults_for(engine, resolved.get("time"))
    if found is not None:
        out.update({f"engine.{key}": f"{value}: {found.why}"
                    for key, value in found.values.items()})
    cluster = resolved.get("cluster")
    entries = cluster.get("replicas") if isinstance(cluster, dict) else None
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not (isinstance(entry, dict) and isinstance(entry.get("time"), dict)):
            continue
        own = entry.get("engine") if isinstance(entry.get("engine"), dict) else {}
        found = defaults_for(own, entry["time"], engine if isinstance(engine, dict) else {})
        if found is not None:
            out.update({f"cluster.replicas[{i}].engine.{key}": f"{value}: {found.why}"
                        for key, value in found.values.items()})
    return out


def defaults_line(resolved: Mapping[str, Any]) -> str | None:
    """One line for `validate` and `run`: the GPU defaults a variant took, grouped by why."""
    by_why: dict[str, list[str]] = {}
    for field, text in derived_defaults(resolved).items():
        value, why = text.split(": ", 1)
        by_why.setdefault(why, []).append(f"{field} {value}")
    return "; ".join(f"{', '.join(fields)}: {why}" for why, fields in by_why.items()) or None
