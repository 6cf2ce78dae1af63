"""The profiled time model: Vidur-format profiles replayed, interpolated, and refused clearly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.errors import KvschedError
from kvsched.timing.profiled import DENSE_OPS, ProfiledStep
from kvsched.timing.roofline import BatchShape

LLAMA7 = "meta-llama/Llama-2-7b-hf"  # 32 layers, hidden 4096


def write_compact(folder, tp=1):
    """Dense ops 1 us + 1 ns per token each; attention and all-reduce on simple lines (ms)."""
    folder.mkdir(exist_ok=True)
    rows = ["num_tokens," + ",".join(DENSE_OPS)]
    for tokens in (1, 64, 128, 512, 1024):
        rows.append(f"{tokens}," + ",".join(str(0.001 + 1e-6 * tokens) for _ in DENSE_OPS))
    (folder / "mlp.csv").write_text("\n".join(rows) + "\n")
    attention = ["kind,batch_size,prefill_chunk_size,kv_cache_size,median_ms",
                 "prefill,1,100,0,0.01", "prefill,1,100,100,0.02", "prefill,1,200,200,0.08",
                 "decode,1,0,100,0.01", "decode,10,0,100,0.02", "decode,10,0,1000,0.11"]
    (folder / "attention.csv").write_text("\n".join(attention) + "\n")
    (folder / "all_reduce.csv").write_text(
        "num_workers,devices_per_node,size,median_ms\n2,2,1024,0.01\n2,2,1048576,0.02\n"
        "2,2,1048576,0.04\n2,1,1024,9.0\n")
    return folder


def test_a_step_is_the_layers_times_the_interpolated_operators(tmp_path):
    step = ProfiledStep(write_compact(tmp_path / "p"), LLAMA7)
    dense = 9 * (0.001 + 1e-6 * 96) * 1e-3  # halfway between the rows at 64 and 128
    assert step.layer_time(96) == pytest.approx(dense)
    # prefill of 100 with 100 cached: 20,000 pairs, measured 0.02 ms
    shape = BatchShape(((100, 100),))
    assert step.duration_shape(shape) == pytest.approx(32 * (9 * 0.0011 + 0.02) * 1e-3)
    # 10 decodes reading 5,500 tokens: halfway between 1,000 and 10,000 KV tokens
    decode = step.duration_shape(BatchShape((), 10, 5500)) / 32 - step.layer_time(10)
    assert decode == pytest.approx(0.065e-3)
    assert step.duration(100, 0, 0, 0) == step.duration_shape(BatchShape(((100, 0),)))


def test_past_the_last_row_time_grows_in_proportion(tmp_path):
    step = ProfiledStep(write_compact(tmp_path / "p"), LLAMA7)
    assert step.layer_time(2048) == pytest.approx(2 * step.layer_time(1024))


def test_tensor_parallel_steps_add_the_all_reduces_of_their_workers(tmp_path):
    tp1 = ProfiledStep(write_compact(tmp_path / "p"), LLAMA7, tp=1)
    tp2 = ProfiledStep(tmp_path / "p", LLAMA7, tp=2)
    # 128 tokens x 4096 x 2 bytes = 1 MiB: two all-reduces of (0.02 + 0.04) / 2 ms, one node
    assert tp2.layer_time(128) - tp1.layer_time(128) == pytest.approx(2 * 0.03e-3)


def test_vidur_raw_files_are_read_per_tp_degree(tmp_path):
    folder = tmp_path / "raw"
    folder.mkdir()
    cols = ",".join(f"time_stats.{op}.median" for op in DENSE_OPS)
    lines = [f"num_tokens,num_tensor_parallel_workers,{cols}"]
    for tp, value in ((1, 0.002), (2, 0.001)):
        for tokens in (1, 1024):
            lines.append(f"{tokens},{tp}," + ",".join([str(value)] * len(DENSE_OPS)))
    (folder / "mlp.csv").write_text("\n".join(lines) + "\n")
    (folder / "attention.csv").write_text(
        "num_tensor_parallel_workers,batch_size,prefill_chunk_size,kv_cache_size,is_prefill,"
        "time_stats.attn_prefill.median,time_stats.attn_decode.median\n"
        "1,1,64,0,True,0.01,\n1,1,128,0,True,0.02,\n1,4,0,256,False,,0.03\n"
        "1,8,0,256,False,,0.05\n")
    step = ProfiledStep(folder, LLAMA7, tp=1)
    assert step.layer_time(500) == pytest.approx(9 * 0.002e-3)
    with pytest.raises(KvschedError, match=r"no rows for tp 4 \(profiled: \[1, 2\]\)"):
        ProfiledStep(folder, LLAMA7, tp=4)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(KvschedError, match="mlp.csv: no such profile file"):
        ProfiledStep(tmp_path, LLAMA7)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 40), kv=st.integers(0, 20_000), steps=st.integers(0, 30))
def test_a_decode_stretch_equals_the_steps_exactly(tmp_path_factory, n, kv, steps):
    step = ProfiledStep(write_compact(tmp_path_factory.mktemp("p")), LLAMA7)
    expected = [step.duration(0, n, kv + k * n, 0) for k in range(steps)]
    assert step.stretch_durations(n, kv, steps) == expected
