"""The real engines' own words, verbatim, where kvsched reports what they would say: vLLM's
rejections of a prompt too long, vLLM 0.8.5's scheduler warnings."""

from __future__ import annotations

from kvsched.blocks import blocks_for
from kvsched.config import EngineConfig
from kvsched.kinds import Reason, Why

# vLLM 0.8.5 core/scheduler.py::Scheduler._preempt, verbatim.
V0_PREEMPTION_WARNING = (
    "Sequence group {} is preempted by PreemptionMode.{} mode because there is not enough KV "
    "cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={}")


def model_len_rejection(prompt_len: int, max_model_len: int) -> str | None:
    """vLLM's input processor check (v1/engine/input_processor.py), messages verbatim: a
    generate model needs room for at least one output token."""
    if prompt_len > max_model_len:
        return (f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
                f"length of {max_model_len}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens.")
    if prompt_len == max_model_len:
        return (f"The decoder prompt (length {prompt_len}) plus the number of requested "
                "output tokens (at least 1) is longer than the maximum model length of "
                f"{max_model_len}. Make sure that `max_model_len` is no smaller than the "
                "number of text tokens (prompt + requested output tokens).")
    return None


def v0_rejection(prompt_len: int, cfg: EngineConfig) -> Reason | None:
    """vLLM 0.8.5 `_schedule_prefills`' warnings, verbatim, for a prompt it ignores: over
    `min(max_model_len, max_num_batched_tokens)` (`max_model_len` with chunking), or whose
    blocks would leave less than the watermark of the whole pool (`AllocStatus.NEVER`)."""
    limit = cfg.max_model_len if cfg.chunked_prefill else min(
        cfg.max_model_len or cfg.max_num_batched_tokens, cfg.max_num_batched_tokens)
    if limit is not None and prompt_len > limit:
        return Reason(f"Input prompt ({prompt_len} tokens) is too long and exceeds limit of "
                      f"{limit}", Why.PROMPT_OVER_BUDGET)
    if cfg.num_blocks - blocks_for(prompt_len, cfg.block_size) < cfg.watermark_blocks:
        return Reason(f"Input prompt ({prompt_len} tokens) + lookahead slots (0) is too long "
                      "and exceeds the capacity of block_manager", Why.NEVER_FITS)
    return None
