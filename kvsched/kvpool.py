"""The KV pool a GPU can hold (`engine.num_blocks: auto`), as vLLM sizes it: what is left of
`gpu_memory_utilization` x memory after the weights and an activation reserve, in blocks."""

from __future__ import annotations

from kvsched.errors import KvschedError
from kvsched.hardware import Gpu, Model, load_gpu, load_model

# CUDA context, NCCL buffers and the peak activations of a forward pass at an ~8k-token budget
# (vLLM's profile run measures them; ~1-3 GiB per GPU for 7B-70B models): a fixed estimate.
ACTIVATION_RESERVE = 2 * 2**30


class PoolDoesNotFit(KvschedError, ValueError):
    """The weights and the reserve leave no room for a single KV block."""


def kv_block_bytes(model: Model | str, tp: int, block_size: int, dtype_bytes: int = 2) -> float:
    """Bytes one block of `block_size` tokens takes on each of the `tp` GPUs (K and V, every
    layer; KV heads replicate when tp exceeds their number)."""
    model = load_model(model)
    kv_heads = max(model.kv_heads / tp, 1.0)
    return model.layers * kv_heads * model.head_dim * 2 * dtype_bytes * block_size


def kv_pool_blocks(model: Model | str, gpu: Gpu | str, tp: int, block_size: int,
                   gpu_memory_utilization: float = 0.9, dtype_bytes: int = 2,
                   activation_reserve: float = ACTIVATION_RESERVE) -> int:
    """Blocks of KV cache per engine: (memory x utilisation - weights / tp - reserve) / block
    bytes, on each GPU. Raises `PoolDoesNotFit` (one line) when that is not positive."""
    model, gpu = load_model(model), load_gpu(gpu)
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if tp < 1 or block_size < 1:
        raise ValueError(f"tp and block_size must be >= 1, got {tp} and {block_size}")
    usable = gpu.memory * gpu_memory_utilization
    weights = model.params * dtype_bytes / tp
    free = usable - weights - activation_reserve
    blocks = int(free // kv_block_bytes(model, tp, block_size, dtype_bytes))
    if blocks < 1:
        raise PoolDoesNotFit(
            f"{model.name} does not fit on {tp} x {gpu.name}: {weights / 1e9:.1f} GB of weights "
            f"and {activation_reserve / 1e9:.1f} GB reserved per GPU exceed the "
            f"{usable / 1e9:.1f} GB usable ({gpu_memory_utilization:g} x {gpu.memory / 1e9:.0f} GB)"
            f"; raise tp or gpu_memory_utilization")
    return blocks
