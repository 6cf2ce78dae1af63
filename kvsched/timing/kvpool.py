"""The KV pool a GPU can hold (`engine.num_blocks: auto`), as vLLM 0.33's GPU worker sizes it.

`determine_available_memory` (v1/worker/gpu_worker.py) takes `gpu_memory_utilization` of the
total CUDA reports, then subtracts what its profile run consumed: the weights, memory outside
torch that grew after its baseline snapshot (NCCL and cuBLAS workspaces), the transient peak
of a dummy forward of `max_num_batched_tokens` tokens and of the sampler's warm-up over
`max_num_seqs` rows of logits, and (on by default since 0.21) its estimate of the CUDA graphs'
memory. What is left, in whole blocks, is the pool (the null block included, as vLLM counts).

The profile run cannot be run here, so its terms are estimated from the model's shapes:
- the sampler warm-up dominates the peak: about 32 bytes per logit element of
  min(max_num_seqs, max_num_batched_tokens) x vocab (the bf16 logits, an fp32 copy, the
  log-softmax and the top-k of the warm-up's second pass); the forward's peak, one layer's
  MLP at the full budget plus the residual streams, T x (6 I / tp + 4 h) bytes, where larger;
- CUDA graphs: about 9 MiB per layer and rank-way of tensor parallelism (0.2-0.7 GiB logged
  for 7-8B models at tp 1, 2.6-3.5 GiB for 80-94 layers at tp 4); none with `enforce_eager`;
- outside torch after the snapshot: 0.15 GiB alone, 0.5 GiB with tensor parallelism.
The weights take 2 bytes each in bf16; with `weight_dtype: fp8` the decoder layers' linear
weights take 1 and the embedding and LM head stay bf16 (vLLM's fp8 quantizes linear layers
only). The activation peak and the CUDA graphs are the same as in bf16 (their tensors stay
bf16). A block holds `kv_cache_dtype`'s bytes per element: 2 (auto: bf16) or 1 (fp8).
README's pool table compares the result with the logs these constants come from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvsched.errors import KvschedError
from kvsched.timing.hardware import (
    KV_DTYPE_BYTES,
    WEIGHT_DTYPE_BYTES,
    Gpu,
    Model,
    load_gpu,
    load_model,
)

GIB = 2**30
DEFAULT_UTILIZATION = 0.92  # vLLM 0.33's CacheConfig.gpu_memory_utilization
SAMPLER_BYTES_PER_LOGIT = 32
CUDA_GRAPH_BYTES_PER_LAYER_RANK = 9 * 2**20
NON_TORCH_BYTES = {1: int(0.15 * GIB)}  # by tp; tp > 1: NON_TORCH_TP_BYTES
NON_TORCH_TP_BYTES = int(0.5 * GIB)


class PoolDoesNotFit(KvschedError, ValueError):
    """The weights and the profile run's memory leave no room for a single KV block."""


@dataclass(frozen=True, slots=True)
class PoolBreakdown:
    """Bytes per GPU of each term of vLLM's budget, and the blocks the KV bytes hold."""

    model: str
    gpu: str
    tp: int
    total: float  # as CUDA reports it
    utilization: float
    weights: float
    activations: float
    cuda_graphs: float
    non_torch: float
    block_bytes: float
    weight_dtype: str = "bf16"
    kv_cache_dtype: str = "auto"

    @property
    def requested(self) -> float:
        return float(math.ceil(self.total * self.utilization))

    @property
    def kv_bytes(self) -> float:
        return self.requested - self.weights - self.activations - self.cuda_graphs - \
            self.non_torch

    @property
    def blocks(self) -> int:
        return int(self.kv_bytes // self.block_bytes)

    def text(self) -> str:
        """validate's line: every term in GiB, as vLLM's log prints them."""
        def gib(value: float) -> str:
            return f"{value / GIB:.2f}"

        kv = "fp8" if self.kv_cache_dtype == "fp8" else "bf16"
        return (f"{self.utilization:g} x {gib(self.total)} GiB = {gib(self.requested)} GiB - "
                f"{self.weight_dtype} weights {gib(self.weights)} - activation peak "
                f"{gib(self.activations)} - CUDA graphs {gib(self.cuda_graphs)} - non-torch "
                f"{gib(self.non_torch)} = {gib(self.kv_bytes)} GiB of {kv} KV cache per GPU")


def kv_block_bytes(model: Model | str, tp: int, block_size: int, dtype_bytes: int = 2) -> float:
    """Bytes one block of `block_size` tokens takes on each of the `tp` GPUs (K and V, every
    layer; KV heads replicate when tp exceeds their number)."""
    model = load_model(model)
    kv_heads = max(model.kv_heads / tp, 1.0)
    return model.layers * kv_heads * model.head_dim * 2 * dtype_bytes * block_size


def activation_peak(model: Model, tp: int, max_num_batched_tokens: int,
                    max_num_seqs: int) -> float:
    """The profile run's transient peak on one GPU: the sampler warm-up or the forward."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    sampler = SAMPLER_BYTES_PER_LOGIT * rows * model.vocab
    forward = max_num_batched_tokens * (6 * model.intermediate / tp + 4 * model.hidden) * 2
    return float(max(sampler, forward))


def pool_breakdown(model: Model | str, gpu: Gpu | str, tp: int, block_size: int,
                   gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                   max_num_batched_tokens: int = 2048, max_num_seqs: int = 128,
                   kv_cache_dtype: str = "auto", weight_dtype: str = "bf16",
                   enforce_eager: bool = False) -> PoolBreakdown:
    """vLLM's budget term by term for `tp` GPUs of type `gpu` serving `model` with weights in
    `weight_dtype` (bf16, fp8) and KV in `kv_cache_dtype` (auto: bf16, fp8)."""
    model, gpu = load_model(model), load_gpu(gpu)
    if weight_dtype not in WEIGHT_DTYPE_BYTES or kv_cache_dtype not in KV_DTYPE_BYTES:
        raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPE_BYTES)} and "
                         f"kv_cache_dtype one of {', '.join(KV_DTYPE_BYTES)}, got "
                         f"{weight_dtype!r} and {kv_cache_dtype!r}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if tp < 1 or block_size < 1:
        raise ValueError(f"tp and block_size must be >= 1, got {tp} and {block_size}")
    return PoolBreakdown(
        model.name, gpu.name, tp, gpu.device_memory, gpu_memory_utilization,
        weights=model.weight_bytes(WEIGHT_DTYPE_BYTES[weight_dtype]) / tp,
        activations=activation_peak(model, tp, max_num_batched_tokens, max_num_seqs),
        cuda_graphs=0.0 if enforce_eager else float(
            CUDA_GRAPH_BYTES_PER_LAYER_RANK * model.layers * tp),
        non_torch=float(NON_TORCH_BYTES.get(tp, NON_TORCH_TP_BYTES)),
        block_bytes=kv_block_bytes(model, tp, block_size, KV_DTYPE_BYTES[kv_cache_dtype]),
        weight_dtype=weight_dtype, kv_cache_dtype=kv_cache_dtype)


def kv_pool_blocks(model: Model | str, gpu: Gpu | str, tp: int, block_size: int,
                   gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                   max_num_batched_tokens: int = 2048, max_num_seqs: int = 128,
                   kv_cache_dtype: str = "auto", weight_dtype: str = "bf16",
                   enforce_eager: bool = False) -> int:
    """Blocks of KV cache per engine (`pool_breakdown`). Raises `PoolDoesNotFit` (one line)
    when not one block fits."""
    pool = pool_breakdown(model, gpu, tp, block_size, gpu_memory_utilization,
                          max_num_batched_tokens, max_num_seqs, kv_cache_dtype, weight_dtype,
                          enforce_eager)
    if pool.blocks < 1:
        rest = pool.activations + pool.cuda_graphs + pool.non_torch
        raise PoolDoesNotFit(
            f"{pool.model} does not fit on {tp} x {pool.gpu}: {pool.weights / 1e9:.1f} GB of "
            f"{weight_dtype} weights and {rest / 1e9:.1f} GB of activations, CUDA graphs and "
            f"buffers per GPU exceed the {pool.requested / 1e9:.1f} GB usable "
            f"({gpu_memory_utilization:g} x {pool.total / 1e9:.1f} GB); raise tp or "
            "gpu_memory_utilization")
    return pool.blocks
