"""`num_blocks: auto`: the KV pool from GPU memory, weights, the reserve and the block size."""

from __future__ import annotations

import pytest

from kvsched.errors import KvschedError
from kvsched.hardware import load_model
from kvsched.kvpool import kv_block_bytes, kv_pool_blocks

LLAMA8 = "meta-llama/Llama-3.1-8B"


def test_llama_8b_on_an_h100_is_the_memory_left_after_weights_and_reserve():
    blocks = kv_pool_blocks(LLAMA8, "h100-sxm", 1, 16)
    assert kv_block_bytes(LLAMA8, 1, 16) == 32 * 8 * 128 * 2 * 2 * 16  # 2 MiB a block
    weights = load_model(LLAMA8).params * 2  # 16.06 GB of bf16
    assert blocks == int((0.9 * 80e9 - weights - 2 * 2**30) // 2**21)
    assert 400_000 < blocks * 16 < 420_000  # tokens of KV: ~54 GB


def test_more_gpus_or_memory_give_a_bigger_pool():
    one = kv_pool_blocks(LLAMA8, "h100-sxm", 1, 16)
    assert kv_pool_blocks(LLAMA8, "h100-sxm", 2, 16) > 2 * one  # half the weights, half a block
    assert kv_pool_blocks(LLAMA8, "h200", 1, 16) > one
    assert kv_pool_blocks(LLAMA8, "h100-sxm", 1, 16, gpu_memory_utilization=0.5) < one
    assert kv_pool_blocks(LLAMA8, "h100-sxm", 1, 32) == pytest.approx(one / 2, abs=1)


def test_a_model_too_big_for_the_gpus_is_one_clear_line():
    with pytest.raises(KvschedError) as info:
        kv_pool_blocks("meta-llama/Llama-3.1-70B", "h100-sxm", 1, 16)
    message = str(info.value)
    assert "\n" not in message and "does not fit on 1 x h100-sxm" in message
    assert kv_pool_blocks("meta-llama/Llama-3.1-70B", "h100-sxm", 4, 16) > 10_000


def test_kv_heads_replicate_beyond_their_number():
    # Llama-3.1-70B has 8 KV heads: at tp 16 each GPU still holds one head per layer
    assert kv_block_bytes("meta-llama/Llama-3.1-70B", 16, 16) == kv_block_bytes(
        "meta-llama/Llama-3.1-70B", 8, 16)
