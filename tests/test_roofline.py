"""The roofline time model: regimes, tensor parallelism, attention, stretches, the protocol."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import make_requests
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.config import EngineConfig
from kvsched.simulator import simulate
from kvsched.timing.hardware import load_calibration
from kvsched.timing.roofline import BatchShape, RooflineStep

LLAMA8 = "meta-llama/Llama-3.1-8B"
LLAMA70 = "meta-llama/Llama-3.1-70B"


@pytest.fixture(scope="module")
def h100() -> RooflineStep:
    return RooflineStep(LLAMA8, "h100-sxm")


def test_small_decode_batches_are_weight_bound(h100):
    """Reading the weights dominates: 8x the decodes costs far less than 8x the time."""
    one, eight = h100.duration(0, 1, 512, 0), h100.duration(0, 8, 8 * 512, 0)
    assert eight < 1.1 * one
    weights = load_calibration("h100-sxm")
    floor = h100.model.layers * h100.model.layer_params * 2 / (  # type: ignore[union-attr]
        h100.gpu.memory_bw * weights.linear_memory_eff)  # type: ignore[union-attr]
    assert floor < one < 1.6 * floor


def test_long_prefills_are_compute_bound(h100):
    """Twice the prefill tokens, about twice the time (plus attention's quadratic share)."""
    ratio = h100.duration(8192, 0, 0, 0) / h100.duration(4096, 0, 0, 0)
    assert 1.9 < ratio < 2.6
    assert h100.duration(64, 0, 0, 0) < 1.3 * h100.duration(1, 0, 0, 0)  # still weight-bound


def test_tensor_parallelism_roughly_halves_the_linear_layers():
    tp1 = RooflineStep(LLAMA70, "h100-sxm", tp=1)
    tp2 = RooflineStep(LLAMA70, "h100-sxm", tp=2)
    for tokens in (1, 2048):
        ratio = sum(tp2.gemm_times(tokens)) / sum(tp1.gemm_times(tokens))
        assert 0.48 < ratio < 0.6
    assert tp1.allreduce_time(2048) == 0
    assert tp2.allreduce_time(2048) > tp2.allreduce_time(1) > 0


def test_a_faster_gpu_is_faster():
    shape = BatchShape(((1024, 0),), 32, 32 * 800)
    a100, h100 = RooflineStep(LLAMA8, "a100-80gb"), RooflineStep(LLAMA8, "h100-sxm")
    assert 1.5 < a100.duration_shape(shape) / h100.duration_shape(shape) < 4


def test_attention_grows_with_the_cached_context(h100):
    fresh = h100.duration_shape(BatchShape(((512, 0),)))
    cached = h100.duration_shape(BatchShape(((512, 8192),)))
    assert cached > 1.2 * fresh
    # 17x the query-key pairs; the kernel's fixed cost keeps the ratio below that
    assert h100.prefill_attention_time(((512, 8192),)) > 5 * h100.prefill_attention_time(
        ((512, 0),))
    longer = h100.duration_shape(BatchShape((), 64, 64 * 4096))
    assert longer > 1.3 * h100.duration_shape(BatchShape((), 64, 64 * 256))


@settings(max_examples=80, deadline=None)
@given(p=st.integers(0, 20_000), n=st.integers(0, 256), kv=st.integers(0, 10**6),
       swapped=st.integers(0, 50))
def test_the_time_model_protocol_reads_one_chunk_without_cached_context(h100, p, n, kv,
                                                                        swapped):
    assert h100.unit == "s" and not h100.whole_steps
    chunks = ((p, 0),) if p else ()
    assert h100.duration(p, n, kv, swapped) == h100.duration_shape(
        BatchShape(chunks, n, kv, swapped))


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 50_000)), max_size=4),
       n=st.integers(0, 256), kv=st.integers(0, 10**6), swapped=st.integers(0, 5))
def test_a_step_priced_from_its_fields_is_its_shape_priced(chunks, n, kv, swapped):
    """The engine's per-step call (no BatchShape made) gives the shape's floats, whether the
    batch size is priced for the first time or read from the caches."""
    fresh = RooflineStep(LLAMA8, "h100-sxm")
    shape = BatchShape(tuple(chunks), n, kv, swapped)
    first = fresh.step_duration(chunks, n, kv, swapped)  # (the caches filled now)
    assert first == fresh.step_duration(chunks, n, kv, swapped) == \
        RooflineStep(LLAMA8, "h100-sxm").duration_shape(shape)
    if first > 0:
        assert fresh.step_utilisation(chunks, n, kv, first) == fresh.utilisation(shape, first)
        assert fresh.utilisation(shape, first) == (
            fresh.flops(shape) / (first * fresh.gpu.peak_flops),  # type: ignore[union-attr]
            fresh.memory_bytes(shape) / (first * fresh.gpu.memory_bw))  # type: ignore[union-attr]


def test_swaps_cost_host_link_time(h100):
    assert h100.duration(0, 0, 0, 3) > h100.duration(0, 0, 0, 0)  # swaps cost host-link time


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 256), kv=st.integers(0, 2_000_000), steps=st.integers(0, 120),
       model=st.sampled_from([LLAMA8, LLAMA70]), tp=st.sampled_from([1, 2, 4]))
def test_a_decode_stretch_equals_the_steps_exactly(n, kv, steps, model, tp):
    step = RooflineStep(model, "a100-80gb", tp)
    expected = [step.duration(0, n, kv + k * n, 0) for k in range(steps)]
    # (a list up to 48 steps, an array beyond: the same floats either way)
    assert list(map(float, step.stretch_durations(n, kv, steps))) == expected


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="tp"):
        RooflineStep(LLAMA8, "h100-sxm", tp=3)
    with pytest.raises(ValueError, match="efficiency|eff"):
        replace(load_calibration("h100-sxm"), linear_memory_eff=1.5)


def test_mfu_flops_count_the_dense_layers(h100):
    shape = BatchShape(((1000, 0),))
    assert 2 * 6.9e9 * 1000 < h100.flops(shape) < 2 * 7.6e9 * 1000  # 7e9 non-embedding weights


def test_it_plugs_into_todays_engine(h100):
    result = simulate(make_requests(6, prompt_len=300, output_len=20),
                      EngineConfig(num_blocks=200), time_model=h100)
    assert result.summary["num_finished"] == 6
    assert result.time_unit == "s"
    assert 0.1 < result.summary["duration"] < 2.0  # ~20 steps of ~10 ms on an H100


def test_mbu_bytes_are_the_weights_and_the_kv_read(h100):
    idle = h100.memory_bytes(BatchShape((), 1, 0))
    assert 14.5e9 < idle < 15.5e9  # 7.5e9 weights in bf16 (the embedding table is not read)
    assert h100.memory_bytes(BatchShape((), 1, 1000)) - idle == 1000 * 32 * 8 * 128 * 2 * 2


def test_a_bigger_gemm_turns_sharper_at_the_crossover():
    """`knee_per_decade`: at the token count where compute time equals weight time, a GEMM
    with 10x the weight bytes sits closer to the hard maximum (ratio 1) than a small one;
    without it every GEMM shares one knee (the ratio is 2^(1/knee) for all)."""
    base = replace(load_calibration("h100-sxm"), kernel_overhead=0.0, knee=1.5, gemm_tile=0.0)

    def crossover_ratio(calibration, gemm_index: int) -> float:
        step = RooflineStep(LLAMA70, "h100-sxm", 1, calibration)
        gemm = step._gemms[gemm_index]
        tokens = gemm.weight_bytes / (gemm.flops_per_token - gemm.bytes_per_token)
        hard = gemm.flops_per_token * tokens
        return (step._gemm(gemm, tokens) - calibration.kernel_overhead) / hard

    flat = replace(base, knee_per_decade=0.0)
    sharp = replace(base, knee_per_decade=0.5)
    # Llama-3.1-70B at TP 1: the o projection (8192 x 8192) is ~7x smaller than gate+up
    assert crossover_ratio(flat, 1) == pytest.approx(2 ** (1 / 1.5))
    assert crossover_ratio(flat, 2) == pytest.approx(2 ** (1 / 1.5))
    assert crossover_ratio(sharp, 2) < crossover_ratio(sharp, 1) < 2 ** (1 / 1.2)


def test_a_calibration_without_knee_per_decade_keeps_one_knee():
    """Calibration files written before the key existed load with one knee for all GEMMs."""
    from dataclasses import asdict

    from kvsched.timing.hardware import Calibration

    values = {k: v for k, v in asdict(load_calibration("a100-80gb")).items()
              if k != "knee_per_decade"}
    assert Calibration(**values).knee_per_decade == 0.0


def test_a_tiled_gemm_computes_whole_tiles_of_token_rows():
    """`gemm_tile`: 4097 tokens compute what 4160 do (65 tiles of 64 rows), one more token
    starts a 66th tile; a tile of 0 leaves the token count as it is."""
    base = replace(load_calibration("h100-sxm"), gemm_tile=0.0)
    plain = RooflineStep(LLAMA8, "h100-sxm", 1, base)
    tiled = RooflineStep(LLAMA8, "h100-sxm", 1, replace(base, gemm_tile=64.0))

    def gemms(step: RooflineStep, tokens: int) -> float:
        return sum(step.gemm_times(tokens))

    assert gemms(tiled, 4097) == pytest.approx(gemms(plain, 4160), rel=2e-3)
    assert gemms(tiled, 4097) > gemms(plain, 4097) * 1.01
    assert gemms(tiled, 4161) > gemms(tiled, 4160) * 1.01
    assert gemms(tiled, 4160) == gemms(plain, 4160)


@settings(max_examples=60, deadline=None)
@given(tokens=st.integers(1, 20000), tile=st.sampled_from([16, 64, 128]))
def test_tiling_costs_at_most_the_next_whole_tile(tokens, tile):
    """Per GEMM: no cheaper than untiled, no dearer than untiled at the next tile multiple."""
    base = replace(load_calibration("a100-80gb"), gemm_tile=0.0)
    plain = RooflineStep(LLAMA8, "a100-80gb", 1, base)
    tiled = RooflineStep(LLAMA8, "a100-80gb", 1, replace(base, gemm_tile=float(tile)))
    whole = -(-tokens // tile) * tile
    for low, got, high in zip(plain.gemm_times(tokens), tiled.gemm_times(tokens),
                              plain.gemm_times(whole), strict=True):
        assert low <= got <= high


def test_a_calibration_without_gemm_tile_gives_the_old_times():
    """Calibration files written before the key existed load untiled; a bad tile is refused."""
    from dataclasses import asdict

    from kvsched.timing.hardware import Calibration

    values = {k: v for k, v in asdict(load_calibration("h100-sxm")).items() if k != "gemm_tile"}
    old = Calibration(**values)
    assert old.gemm_tile == 0.0
    step = RooflineStep(LLAMA8, "h100-sxm", 1, old)
    gemm = step._gemms[2]
    compute, memory = gemm.flops_per_token * 100, gemm.weight_bytes + gemm.bytes_per_token * 100
    assert step.gemm_times(100)[2] == pytest.approx(
        (compute ** gemm.p + memory ** gemm.p) ** gemm.inv_p + old.kernel_overhead)
    for bad in (-64.0, 1.5):
        with pytest.raises(ValueError, match="gemm_tile"):
            replace(old, gemm_tile=bad)


def test_a_run_without_utilisation_differs_only_in_mfu_and_mbu(h100):
    """`utilisation=False, itl=False` (what a capacity probe asks for) leaves every record as
    it was but the mfu and mbu columns, which go empty, and the summary's mfu, mbu and itl
    figures, which go None."""
    requests = make_requests(40, 300, 60, interval=0.02)
    config = EngineConfig(max_num_batched_tokens=512, num_blocks=400, chunked_prefill=True)
    full = simulate(requests, config, time_model=h100)
    bare = simulate(requests, config, time_model=h100, utilisation=False, itl=False)
    left_out = {"mfu_mean", "mbu_mean", "itl_mean", "itl_p50", "itl_p90", "itl_p95", "itl_p99"}
    assert all(full.summary[key] is not None for key in left_out)
    assert all(bare.summary[key] is None for key in left_out)
    assert {k: v for k, v in full.summary.items() if k not in left_out} == \
        {k: v for k, v in bare.summary.items() if k not in left_out}
    assert [r.as_row() for r in full.requests] == [r.as_row() for r in bare.requests]
    assert len(full.steps) == len(bare.steps) > 40
    assert all(row[19] is not None and row[20] is not None for row in full.steps)
    assert all(row[19] is None and row[20] is None for row in bare.steps)
    assert [row[:19] + row[21:] for row in full.steps] == \
        [row[:19] + row[21:] for row in bare.steps]


def test_fp8_weights_read_half_the_layers_bytes_and_decode_faster(h100):
    """fp8 weights: each layer GEMM reads half the weight bytes (the LM head stays bf16), so a
    weight-bound decode step is faster; a long prefill runs at the H100's fp8 peak."""
    fp8 = RooflineStep(LLAMA8, "h100-sxm", weight_dtype="fp8")
    model = h100.model
    layer = model.layers * model.layer_params  # type: ignore[union-attr]
    idle = BatchShape((), 1, 0)
    assert h100.memory_bytes(idle) - fp8.memory_bytes(idle) == layer  # one byte a weight less
    decode = (0, 8, 8 * 512, 0)
    assert fp8.duration(*decode) < 0.7 * h100.duration(*decode)
    for bf16_gemm, fp8_gemm in zip(h100._gemms, fp8._gemms, strict=True):
        assert fp8_gemm.weight_bytes == bf16_gemm.weight_bytes / 2
        assert fp8_gemm.flops_per_token == pytest.approx(bf16_gemm.flops_per_token * 989 / 1979)
    assert fp8._head == h100._head
    assert fp8.duration(8192, 0, 0, 0) < 0.8 * h100.duration(8192, 0, 0, 0)


def test_fp8_weights_on_an_ampere_gpu_compute_in_bf16():
    """An A100 has no fp8 Tensor Cores (vLLM's Marlin runs fp8 weights weight-only): half the
    bytes, the same FLOPS."""
    bf16, fp8 = RooflineStep(LLAMA8, "a100-80gb"), RooflineStep(LLAMA8, "a100-80gb",
                                                                weight_dtype="fp8")
    for bf16_gemm, fp8_gemm in zip(bf16._gemms, fp8._gemms, strict=True):
        assert fp8_gemm.flops_per_token == bf16_gemm.flops_per_token
        assert fp8_gemm.weight_bytes == bf16_gemm.weight_bytes / 2


def test_fp8_kv_reads_half_the_kv_bytes(h100):
    """kv_cache_dtype fp8: a decode's KV read costs half, the bytes counted for MBU halve, a
    swapped block moves half; a step without KV reads is unchanged."""
    fp8 = RooflineStep(LLAMA8, "h100-sxm", kv_cache_dtype="fp8")
    assert fp8.duration(0, 8, 0, 0) == h100.duration(0, 8, 0, 0)
    long = (0, 8, 8 * 32_000, 0)
    assert fp8.duration(*long) < h100.duration(*long)
    assert fp8._kv_coef == pytest.approx(h100._kv_coef / 2)
    assert fp8._swap_per_block == h100._swap_per_block / 2
    assert fp8.memory_bytes(BatchShape((), 1, 1000)) - fp8.memory_bytes(BatchShape((), 1, 0)) \
        == 1000 * 32 * 8 * 128 * 2 * 1


def test_unknown_dtypes_are_refused():
    with pytest.raises(ValueError, match="weight_dtype must be one of bf16, fp8"):
        RooflineStep(LLAMA8, "h100-sxm", weight_dtype="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8"):
        RooflineStep(LLAMA8, "h100-sxm", kv_cache_dtype="fp16")


def test_mfu_with_fp8_weights_is_against_the_fp8_peak():
    """The same FLOPs over the same seconds: half the MFU against the H100's fp8 peak
    (1,979 TFLOPS) as against its bf16 one (989); on an A100 (no fp8) the bf16 peak."""
    shape, seconds = BatchShape(((2048, 0),)), 0.05
    bf16, fp8 = RooflineStep(LLAMA8, "h100-sxm"), RooflineStep(LLAMA8, "h100-sxm",
                                                                weight_dtype="fp8")
    assert fp8.utilisation(shape, seconds)[0] == pytest.approx(
        bf16.utilisation(shape, seconds)[0] * 989 / 1979)
    a100 = RooflineStep(LLAMA8, "a100-80gb", weight_dtype="fp8")
    assert a100.utilisation(shape, seconds)[0] == RooflineStep(LLAMA8, "a100-80gb").utilisation(
        shape, seconds)[0]
