"""Engine presets: named bundles of rule choices and defaults, one per engine version.

A preset is data. `engine: {preset: vllm_v1, num_blocks: 4000}` is read as the preset's
settings with the keys written beside it on top; variants and `--set` merge into the
scenario before that, so `--set engine.preset=vllm_v0,vllm_v1,sglang` sweeps presets.
Keys are the `engine:` keys of a scenario (`kvsched.schema.EngineSpec`).

`exact` says whether the preset is checked decision for decision against the real engine
(`vllm_v1`: conformance/ and tests/test_presets_vllm_v1.py; `vllm_v0`: conformance/RULES.md, V0,
and tests/test_conformance_v0.py); `missing` names the engine's
rules that kvsched does not model yet, so that a preset never claims more than it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple


class GpuTier(NamedTuple):
    """Settings an engine's server takes on GPUs of at least `min_gib` GiB of device memory
    whose name contains none of `unless`; `values` per usage (`serve`, `offline`)."""

    min_gib: float
    unless: tuple[str, ...]
    values: Mapping[str, Mapping[str, int]]
    label: str


def _tier(min_gib: float, label: str, serve: tuple[int, int], offline: tuple[int, int],
          unless: tuple[str, ...] = ()) -> GpuTier:
    def pair(values: tuple[int, int]) -> Mapping[str, int]:
        return MappingProxyType({"max_num_batched_tokens": values[0], "max_num_seqs": values[1]})

    return GpuTier(min_gib, unless, MappingProxyType({"serve": pair(serve),
                                                      "offline": pair(offline)}), label)


class Preset(NamedTuple):
    """One engine version as engine keys: the `settings` a scenario's `engine: {preset:
    ...}` starts from, what the preset reproduces and how far that is checked (see the
    module's docstring), and the GPU defaults its server takes."""

    name: str
    engine: str  # the engine and version it reproduces
    summary: str
    settings: Mapping[str, Any]
    exact: bool = False
    missing: tuple[str, ...] = ()
    # settings that replace `settings` when chunked prefill is on (V0 runs another
    # scheduler then: _schedule_chunked_prefill); keys written beside the preset still win
    when_chunked: Mapping[str, Any] = MappingProxyType({})
    checked: str = ""  # how far it is proven, where `exact` alone would say too little
    # settings by the GPU the time model names, first matching tier (kvsched.timing.serve_defaults),
    # for the keys not written; `settings` holds the engine class's own defaults
    gpu_defaults: tuple[GpuTier, ...] = ()
    gpu_defaults_source: str = ""


def _preset(name: str, engine: str, summary: str, settings: dict[str, Any], *,
            exact: bool = False, missing: tuple[str, ...] = (),
            when_chunked: dict[str, Any] | None = None, checked: str = "",
            gpu_defaults: tuple[GpuTier, ...] = (), gpu_defaults_source: str = "") -> Preset:
    return Preset(name, engine, summary, MappingProxyType(settings), exact, missing,
                  MappingProxyType(when_chunked or {}), checked, gpu_defaults,
                  gpu_defaults_source)


# vLLM 0.33.0 `EngineArgs.get_batch_defaults` (engine/arg_utils.py): by the device's total
# memory and name; `serve` is the OpenAI API server's usage context, `offline` the LLM class.
VLLM_SERVE_TIERS = (
    _tier(160, ">= 160 GiB", (16384, 1024), (16384, 1024)),
    _tier(70, ">= 70 GiB and not an A100", (8192, 1024), (16384, 1024), unless=("a100",)),
    _tier(0, "under 70 GiB, or an A100", (2048, 256), (8192, 256)),
)


PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in (
    _preset("lesson", "the lesson's demo engine",
            "today's defaults: decodes first, then chunks, then admissions; whole prompt "
            "reserved at admission; a step that preempted may still admit", {}),
    _preset("vllm_v1", "vLLM 0.33.0, V1 engine (AsyncScheduler, as vllm serve runs it; "
            "async_scheduling: false for the sync Scheduler)",
            "one running loop in admission order (decodes and chunks mixed, blocks per "
            "chunk), victims from the tail (fcfs) or max (priority, arrival) with tokens given "
            "back; no admission in a step that preempted; the full-prompt gate; "
            "num_blocks counts the null block; async scheduling on, as vLLM 0.33 turns it "
            "on when the flag is not given (config/vllm.py VllmConfig.__post_init__: unless "
            "a pooling model, pipeline parallelism, an executor without it or an "
            "incompatible speculative method): each step is decided while the one before "
            "runs, so what that step finishes still holds its blocks and places, and an "
            "arrival during it waits a step more",
            {"step_order": "running_loop", "victim": "by_policy", "requeue": "by_policy",
             "admit_after_preempt": False, "chunked_prefill": True,
             "long_prefill_token_threshold": 0, "scheduler_reserve_full_isl": True,
             "null_block": True, "watermark": 0.0, "preemption": "recompute",
             "max_num_batched_tokens": 2048, "max_num_seqs": 128,
             "enable_prefix_caching": True, "prefix_accounting": "v1",
             "async_scheduling": True},
            exact=True, gpu_defaults=VLLM_SERVE_TIERS,
            gpu_defaults_source="vLLM 0.33.0 engine/arg_utils.py get_batch_defaults",
            missing=("speculative decoding", "multi-sequence requests (n > 1)",
                     "KV connectors, LoRA, multimodal")),
    _preset("vllm_v0", "vLLM 0.8.5, V0 engine",
            "prefill-first steps without chunking, victims from the tail re-queued at the "
            "head in admission order, no prefill while a swapped request waits, swap-in only "
            "in a step that preempted nothing, watermark 1%, a decode needs a free block, "
            "priority sorts the queue only in steps without a prefill, the preemption warning; "
            "with enable_chunked_prefill V0's chunked scheduler (one running queue, decodes "
            "and chunks in its order, swap-ins at its front, prefills past swapped "
            "requests, no sorting by priority)",
            {"step_order": "prefill_first", "victim": "last_admitted", "requeue": "front",
             "admit_after_preempt": False, "chunked_prefill": False,
             "long_prefill_token_threshold": 0, "watermark": 0.01, "preemption": "recompute",
             "max_num_batched_tokens": 2048, "max_num_seqs": 256,
             "on_unschedulable": "reject", "preemption_warning": True,
             "swapped_fifo": True, "delay_factor": 0.0, "rejection_texts": "vllm_v0",
             "append_free_block": True, "priority_preemption": True, "swap_prefills": True,
             "enable_prefix_caching": False, "prefix_accounting": "v0"},
            missing=(
                     "V0 ignores a prompt when it reaches the head, kvsched at arrival; a "
                     "prompt that fits but whose output cannot is rejected (V0 would thrash)",
                     "delay_factor and prefix caching are not checked against V0",
                     "multi-sequence groups"),
            when_chunked={"step_order": "decode_first", "priority_preemption": False,
                          "priority_orders_queue": False,
                          "admit_after_preempt": True, "swap_in_after_preempt": False,
                          "prefill_past_swapped": True, "swap_in_front": True,
                          "readmit_victims": False, "victim": "queue_tail"},
            exact=True),
    _preset("sglang", "SGLang 0.5.23",
            "prefill-first steps with chunking (one chunked request at a time, continued "
            "first); admission reserves the decode tokens running requests are expected to "
            "write (new_token_ratio) and stops at a full batch until a request leaves it; "
            "max_prefill_tokens per step; retraction victim = fewest generated then "
            "longest prompt, re-queued at the back, the ratio re-estimated",
            {"step_order": "prefill_first", "victim": "fewest_generated", "requeue": "back",
             "admit_after_preempt": True, "chunked_prefill": True,
             "long_prefill_token_threshold": 0, "watermark": 0.0, "preemption": "recompute",
             "max_num_batched_tokens": 8192, "max_num_seqs": 256,
             "admission_rule": "future_tokens", "max_prefill_tokens": 16384,
             "schedule_conservativeness": 1.0,
             "enable_prefix_caching": True, "prefix_accounting": "v1", "prefix_cache": "radix"},
            missing=("priorities as with "
                     "--schedule-low-priority-values-first (SGLang's default serves larger "
                     "values first: negate them)", "priority preemption breaks ties by "
                     "arrival, SGLang by the last entry into the queue",
                     "the OOM abort of a last request that cannot decode alone",
                     "--enable-mixed-chunk", "page_size is block_size (SGLang's default "
                     "is 1)", "the random policy reshuffles every round in SGLang; here "
                     "each request draws once per queue entry",
                     "the radix cache's use by the scheduling loop (when a round matches, "
                     "inserts and locks) is not checked against SGLang's code (the tree "
                     "itself is: conformance/SGLANG_RULES.md S16-S17)",
                     "SGLang's default overlap event loop (results a step late; kvsched runs "
                     "--disable-overlap-schedule's event_loop_normal)",
                     "ignore_eos requests (SGLang reserves their whole output, ratio 1, and "
                     "with caching off admits them by another test)"),
            checked="admission and retraction checked against SGLang's own classes, and its "
                    "scheduling loop step by step with the radix cache off "
                    "(conformance/SGLANG_RULES.md)"),
)})


def expand(engine: Mapping[str, Any]) -> dict[str, Any]:
    """An `engine:` mapping with its preset's settings filled in under the keys written."""
    name = engine.get("preset", "lesson")
    preset = PRESETS.get(name) if isinstance(name, str) else None
    if preset is None:
        return dict(engine)  # the schema refuses the name, listing the presets
    settings = dict(preset.settings)
    chunked = engine.get("chunked_prefill", engine.get("enable_chunked_prefill",
                                                       settings.get("chunked_prefill")))
    if chunked is True:
        settings.update(preset.when_chunked)
    return {**settings, **engine}


def describe() -> str:
    """Every preset: the engine it reproduces, each setting, and what it leaves out."""
    lines: list[str] = []
    for preset in PRESETS.values():
        check = preset.checked or ("checked step by step against the real engine"
                                   if preset.exact else "not checked against the real engine")
        lines.append(f"{preset.name}: {preset.engine} ({check})")
        lines.append(f"  {preset.summary}")
        if preset.settings:
            width = max(map(len, preset.settings))
            lines.extend(f"  {key:<{width}}  {_show(value)}"
                         for key, value in preset.settings.items())
        else:
            lines.append("  (every engine default, see `EngineConfig`)")
        if preset.when_chunked:
            lines.append("  with chunked prefill: " + ", ".join(
                f"{key} {_show(value)}" for key, value in preset.when_chunked.items()))
        lines.extend(_describe_tiers(preset))
        if preset.missing:
            lines.append("  not modelled: " + "; ".join(preset.missing))
        lines.append("")
    lines.append("Use: engine: {preset: vllm_v1, num_blocks: 4000}; keys beside the preset "
                 "override it.")
    lines.append("With time: {kind: roofline}, engine.num_blocks: auto sizes the KV pool as "
                 "vLLM 0.33 does: weights in time.weight_dtype (bf16 by default, or fp8), KV in "
                 "engine.kv_cache_dtype (auto: the model's bf16, or fp8); kvsched validate "
                 "prints the budget term by term.")
    return "\n".join(lines)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _describe_tiers(entry: Preset) -> list[str]:
    """`kvsched presets`' line for a preset's GPU table (`kvsched.timing.serve_defaults`)."""
    if not entry.gpu_defaults:
        return []
    parts = []
    for tier in entry.gpu_defaults:
        serve, offline = tier.values["serve"], tier.values["offline"]
        text = f"{tier.label}: {_pair(serve)}"
        if offline != serve:
            text += f" (offline {_pair(offline)})"
        parts.append(text)
    return [f"  with a GPU (time: roofline or profiled with gpu), engine.usage serve (default) "
            f"or offline sets max_num_batched_tokens/max_num_seqs as {entry.gpu_defaults_source}: "
            + "; ".join(parts)]


def _pair(values: Mapping[str, int]) -> str:
    return f"{values['max_num_batched_tokens']}/{values['max_num_seqs']}"
