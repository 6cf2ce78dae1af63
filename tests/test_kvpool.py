"""`num_blocks: auto`: the KV pool from GPU memory, weights, the reserve and the block size."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvsched.errors import KvschedError
from kvsched.timing.hardware import load_model
from kvsched.timing.kvpool import kv_block_bytes, kv_pool_blocks, pool_breakdown

LLAMA8 = "meta-llama/Llama-3.1-8B"
LLAMA70 = "meta-llama/Llama-3.1-70B"


def test_llama_8b_on_an_h100_is_vllms_budget_term_by_term():
    """0.92 of the 79.19 GiB CUDA reports, less the weights, the sampler warm-up's peak over
    128 rows of a 128,256-token vocabulary, 32 layers of CUDA graphs and the non-torch
    growth, in 2 MiB blocks."""
    blocks = kv_pool_blocks(LLAMA8, "h100-sxm", 1, 16)
    assert kv_block_bytes(LLAMA8, 1, 16) == 32 * 8 * 128 * 2 * 2 * 16  # 2 MiB a block
    weights = load_model(LLAMA8).params * 2  # 16.06 GB of bf16
    requested = math.ceil(85_027_979_264 * 0.92)
    rest = 32 * 128 * 128_256 + 9 * 2**20 * 32 + int(0.15 * 2**30)
    assert blocks == int((requested - weights - rest) // 2**21)
    pool = pool_breakdown(LLAMA8, "h100-sxm", 1, 16)
    assert pool.blocks == blocks and pool.total == 85_027_979_264
    assert pool.text().startswith("0.92 x 79.19 GiB = 72.85 GiB - bf16 weights 14.96 - "
                                  "activation peak 0.49 - CUDA graphs 0.28 - non-torch 0.15 = ")


# vLLM's startup logs ("Available KV cache memory: X GiB"; see README's pool table):
# (version, model, GPU, tp, gpu_memory_utilization, budget, seats, enforce_eager, weight dtype,
#  logged GiB)
LOGS = [
    ("0.31.0", LLAMA8, "a100-80gb", 1, 0.92, 2048, 256, False, "bf16", 56.21),
    ("0.15.1", LLAMA8, "a100-40gb", 1, 0.9, 8192, 256, True, "bf16", 19.28),
    ("0.11.0", LLAMA8, "h100-sxm", 1, 0.9, 8192, 1024, False, "bf16", 51.38),
    ("0.6.5", "meta-llama/Meta-Llama-3-8B", "h100-sxm", 1, 0.9, 2048, 256, False, "bf16", 53.29),
    # llm-d-benchmark config_explorer/empirical-vllm-memory-results.md:
    # RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic (Llama-3.1-70B's shapes) at tp 2
    ("0.11.0", LLAMA70, "h100-sxm", 2, 0.9, 8192, 1024, False, "fp8", 32.0),
]


@pytest.mark.parametrize("log", LOGS, ids=[f"{v}-{g}-tp{tp}" for v, _, g, tp, *_ in LOGS])
def test_the_pool_is_within_5_percent_of_vllms_logs(log):
    _version, model, gpu, tp, util, budget, seats, eager, weights, logged = log
    pool = pool_breakdown(model, gpu, tp, 16, util, budget, seats, enforce_eager=eager,
                          weight_dtype=weights)
    assert pool.kv_bytes / 2**30 == pytest.approx(logged, rel=0.05)


def test_the_fp8_70b_checkpoint_on_one_h100_does_not_fit_as_in_vllms_log():
    """The same file's tp-1 run: 67.72 GiB of fp8 weights, -1.44 GiB of KV memory ("No
    available memory for the cache blocks"); kvsched's weights are within 0.2% and it
    refuses the pool too."""
    pool = pool_breakdown(LLAMA70, "h100-sxm", 1, 16, 0.9, 8192, 1024, weight_dtype="fp8")
    assert pool.weights / 2**30 == pytest.approx(67.72, rel=0.002)
    assert pool.kv_bytes < 0
    with pytest.raises(KvschedError, match="fp8 weights"):
        kv_pool_blocks(LLAMA70, "h100-sxm", 1, 16, 0.9, 8192, 1024, weight_dtype="fp8")


def test_the_qwen_72b_row_is_off_by_vllm_0_19s_profile_run_alone():
    """README's last row (vLLM 0.19.0, Qwen2.5-72B on 4 L40S, 0.9, 2048/256): 5.11 GiB logged
    without the 2.73 GiB CUDA-graph estimate 0.19 printed but did not charge. kvsched is -27%
    off, and all of it is the profile run (0.19 warmed the sampler up once, 0.33 twice):
    the weights and the CUDA-graph estimate agree with the log, and with the log's own
    profile-run memory the pool is within 5%."""
    gib = 2**30
    pool = pool_breakdown("Qwen/Qwen2.5-72B", "l40s", 4, 16, 0.9, 2048, 256)
    logged_pool, logged_graphs, logged_weights = 5.11 - 2.73, 2.73, 33.98
    assert pool.kv_bytes / gib / logged_pool - 1 == pytest.approx(-0.27, abs=0.01)
    assert pool.weights / gib == pytest.approx(logged_weights, rel=0.005)
    assert pool.cuda_graphs / gib == pytest.approx(logged_graphs, rel=0.05)
    logged_profile = pool.requested / gib - logged_weights - 5.11  # peak + non-torch
    assert (pool.activations + pool.non_torch) / gib - logged_profile == pytest.approx(
        0.68, abs=0.01)
    with_logged_profile = (pool.requested - pool.weights - pool.cuda_graphs) / gib \
        - logged_profile
    assert with_logged_profile == pytest.approx(logged_pool, rel=0.05)


def test_the_profile_run_grows_with_the_seats_and_the_budget():
    """H100's serve defaults (8192 tokens, 1024 seats) cost ~3.4 GiB more than 2048/128:
    the sampler's warm-up over 1024 rows of logits."""
    small = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, 0.92, 2048, 128)
    large = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, 0.92, 8192, 1024)
    assert (large.activations - small.activations) / 2**30 == pytest.approx(3.42, abs=0.01)
    assert large.blocks < small.blocks
    # a small vocabulary at a large budget: the forward's MLP peak wins
    mistral = pool_breakdown("mistralai/Mistral-7B-v0.1", "h100-sxm", 1, 16, 0.92, 16384, 64)
    model = load_model("mistralai/Mistral-7B-v0.1")
    assert mistral.activations == 16384 * (6 * model.intermediate + 4 * model.hidden) * 2


def test_fp8_kv_holds_twice_the_blocks_and_eager_gives_back_the_graphs():
    auto = pool_breakdown(LLAMA8, "h100-sxm", 1, 16)
    fp8 = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, kv_cache_dtype="fp8")
    assert fp8.kv_bytes == auto.kv_bytes and fp8.blocks == int(auto.kv_bytes // 2**20)
    eager = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, enforce_eager=True)
    assert eager.cuda_graphs == 0 and eager.kv_bytes - auto.kv_bytes == 32 * 9 * 2**20


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


def scenario(tmp_path: Path, engine: str, time: str = "") -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(f"name: pool\nengine: {{preset: vllm_v1, num_blocks: auto{engine}}}\n"
                    f"time: {{kind: roofline, model: {LLAMA8}, gpu: h100-sxm{time}}}\n"
                    "workload: {kind: synthetic, num_requests: 5, prompt_len: 50, output_len: 5,"
                    " arrival: {kind: all_at_once}}\n", encoding="utf-8")
    return path


def blocks_of(path) -> int:
    from kvsched.scenario import load_scenario

    return load_scenario(path).variants[0].spec.engine.num_blocks


def test_validate_prints_the_budget_and_the_engine_keys_move_the_pool(tmp_path):
    from typer.testing import CliRunner

    from kvsched.cli import app

    shown = CliRunner().invoke(app, ["validate", str(scenario(tmp_path, ""))])
    assert shown.exit_code == 0, shown.output
    assert ("(0.92 x 79.19 GiB = 72.85 GiB - bf16 weights 14.96 - activation peak 3.91 - CUDA "
            "graphs 0.28 - non-torch 0.15 = 53.55 GiB of bf16 KV cache per GPU)") in shown.stdout
    auto = blocks_of(scenario(tmp_path, ""))
    assert blocks_of(scenario(tmp_path, ", kv_cache_dtype: fp8")) in (2 * auto, 2 * auto + 1)
    assert blocks_of(scenario(tmp_path, ", enforce_eager: true")) == auto + 32 * 9 // 2
    assert blocks_of(scenario(tmp_path, ", max_num_seqs: 128, max_num_batched_tokens: 2048")
                     ) > auto + 1500  # the smaller profile run leaves ~3.4 GiB more
    bad = CliRunner().invoke(app, ["validate", str(scenario(tmp_path, ", kv_cache_dtype: int4"))])
    assert bad.exit_code == 2
    (line,) = bad.stderr.strip().splitlines()
    assert "engine.kv_cache_dtype: unknown value 'int4'; expected one of: auto, fp8" in line


def test_fp8_weights_free_a_byte_a_layer_weight_for_kv(tmp_path):
    """`time.weight_dtype: fp8`: the layers' linear weights take one byte each (the embedding
    and LM head stay bf16), so the pool gains exactly their bytes, in whole blocks; with fp8
    KV as well, every block is half the size."""
    model = load_model(LLAMA8)
    bf16 = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, 0.92, 8192, 1024)
    fp8 = pool_breakdown(LLAMA8, "h100-sxm", 1, 16, 0.92, 8192, 1024, weight_dtype="fp8")
    layers = model.layers * model.layer_params
    assert bf16.weights - fp8.weights == layers
    assert fp8.weights == layers + model.vocab * model.hidden * 2 * 2  # embedding + LM head
    auto = blocks_of(scenario(tmp_path, ""))
    assert auto == bf16.blocks
    expected = int((bf16.kv_bytes + layers) // 2**21)
    assert blocks_of(scenario(tmp_path, "", ", weight_dtype: fp8")) == expected > auto + 3000
    both = blocks_of(scenario(tmp_path, ", kv_cache_dtype: fp8", ", weight_dtype: fp8"))
    assert both == int((bf16.kv_bytes + layers) // 2**20)


def test_validate_names_the_dtypes_and_refuses_an_unknown_one(tmp_path):
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = scenario(tmp_path, ", kv_cache_dtype: fp8", ", weight_dtype: fp8")
    shown = CliRunner().invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    assert " - fp8 weights 8.46 - " in shown.stdout
    assert "GiB of fp8 KV cache per GPU" in shown.stdout
    bad = CliRunner().invoke(app, ["validate", str(scenario(tmp_path, "", ", weight_dtype: int4"))])
    assert bad.exit_code == 2
    (line,) = bad.stderr.strip().splitlines()
    assert "time.weight_dtype: unknown value 'int4'; expected one of: bf16, fp8" in line


def test_run_json_records_the_dtypes(tmp_path):
    """run.json's resolved scenario holds the weight dtype beside the model and the KV dtype
    in the engine, and the run's time model uses them."""
    import json

    from typer.testing import CliRunner

    from kvsched.cli import app
    from kvsched.runner import time_model_of
    from kvsched.scenario import load_scenario

    path = scenario(tmp_path, ", kv_cache_dtype: fp8", ", weight_dtype: fp8")
    step = time_model_of(load_scenario(path).variants[0].spec)
    assert (step.weight_dtype, step.kv_cache_dtype) == ("fp8", "fp8")  # type: ignore[attr-defined]
    ran = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert ran.exit_code == 0, ran.output
    (record,) = (tmp_path / "out").glob("*/*/run.json")
    resolved = json.loads(record.read_text())["resolved"]
    assert resolved["time"]["weight_dtype"] == "fp8"
    assert resolved["engine"]["kv_cache_dtype"] == "fp8"
