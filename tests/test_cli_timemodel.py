"""The time-model commands: `kvsched step-time` (one batch or a CSV) and `kvsched fit-linear`."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.timing.roofline import BatchShape, RooflineStep

MODEL = ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm")
HEADER = ("num_prefill_requests,prefill_tokens_each,prefill_cached_kv_each,num_decode_requests,"
          "mean_kv_context")


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_one_batch_prints_the_roofline_time():
    result = invoke("step-time", *MODEL, "--prefill", "1024x2", "--decode", "16@512")
    assert result.exit_code == 0, result.output
    expected = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm").duration_shape(
        BatchShape(((1024, 0), (1024, 0)), 16, 16 * 512))
    assert result.output.strip() == f"{expected * 1e3:.3f} ms"


def test_a_batches_file_gets_predicted_ms(tmp_path):
    """The rows with predicted_ms added are printed (--out: written to a file); the input
    file is only read (tests/test_output_safety.py)."""
    path = tmp_path / "batches.csv"
    path.write_text(f"{HEADER},note\n1,2048,0,0,0,prefill\n0,0,0,64,1024,decode\n"
                    "2,512,4096,32,2000,mixed\n")
    result = invoke("step-time", *MODEL, "--tp", "1", "--batches", path)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == [*HEADER.split(","), "note", "predicted_ms"]
    prefill, decode, mixed = frame.predicted_ms
    assert decode < prefill and decode < mixed  # weight-bound decodes are the cheapest here
    step = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm")
    assert mixed == pytest.approx(step.duration_shape(
        BatchShape(((512, 4096),) * 2, 32, 32 * 2000)) * 1e3, abs=1e-4)


@pytest.mark.parametrize(("body", "message"), [
    ("1,2048,0,0\n", "missing column(s) mean_kv_context"),
    ("1,20.5,0,0,0\n", "row 2: prefill_tokens_each must be an integer >= 0, got '20.5'"),
    ("1,20,0,0,0\n1,-3,0,0,0\n", "row 3: prefill_tokens_each"),
])
def test_bad_batches_are_one_line_and_exit_2(tmp_path, body, message):
    path = tmp_path / "b.csv"
    header = HEADER if "missing" not in message else HEADER.rsplit(",", 1)[0]
    path.write_text(f"{header}\n{body}")
    result = invoke("step-time", *MODEL, "--batches", path)
    assert result.exit_code == 2
    assert message in result.output and result.output.count("\n") == 1


def test_unknown_gpu_and_bad_syntax_are_input_errors():
    result = invoke("step-time", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "b300")
    assert result.exit_code == 2 and "known: a100-40gb" in result.output
    result = invoke("step-time", *MODEL, "--decode", "16x512")
    assert result.exit_code == 2 and "--decode: expected N@CONTEXT" in result.output
    assert invoke("step-time", *MODEL, "--tp", "3").exit_code == 2  # 32 heads


def test_fit_linear_prints_a_pasteable_time_block():
    result = invoke("fit-linear", *MODEL)
    assert result.exit_code == 0, result.output
    first, note = result.output.strip().splitlines()
    assert first.startswith("time: {kind: linear, base: ")
    assert "median" in note


@pytest.mark.parametrize(("args", "says"), [
    ((), "an empty batch (no prefill token and no decode)"),
    (("--prefill", "0x0"), "an empty batch"),
    (("--prefill", "1024x0"), "an empty batch"),
    (("--prefill", "0x2"), "2 prefill chunks of 0 tokens"),
    (("--prefill", f"{10 ** 23}x{10 ** 17}"), "1e+17 prefill chunks: at most 1,048,576"),
    (("--decode", f"{10 ** 20}@{10 ** 20}"), "1e+20 decodes: at most 1,048,576"),
    (("--decode", f"16@{10 ** 20}"), "1e+20 decode context: at most 1,099,511,627,776"),
    (("--prefill", "512x1", "--cached", str(2 ** 41)),
     "2,199,023,255,552 cached tokens per chunk: at most 1,099,511,627,776"),
])
def test_an_empty_or_absurd_batch_is_one_line(args, says):
    """Issue 23: 0x0 printed 0.000 ms, 10^23x10^17 ran out of memory with a traceback,
    10^20@10^20 printed 4.7e35 ms."""
    result = invoke("step-time", *MODEL, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: step-time: {says}")
    assert result.stderr.count("\n") == 1 and not result.stdout


@pytest.mark.parametrize(("row", "says"), [
    ("0,0,0,0,0", "row 2: an empty batch"),
    ("1,0,0,0,0", "row 2: 1 prefill chunks of 0 tokens"),
    ("1,1e300,0,0,0", "row 2: 1e+300 tokens per prefill chunk: at most 1,099,511,627,776"),
    ("0,0,0,1e300,1", "row 2: 1e+300 decodes"),
])
def test_an_empty_or_absurd_batch_row_is_one_line(tmp_path, row, says):
    path = tmp_path / "b.csv"
    path.write_text(f"{HEADER}\n{row}\n")
    result = invoke("step-time", *MODEL, "--batches", path)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {path}: {says}")
    assert result.stderr.count("\n") == 1


def test_the_largest_batch_allowed_is_timed():
    result = invoke("step-time", *MODEL, "--decode", f"{2 ** 20}@{2 ** 40}")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith(" ms")


def test_step_time_takes_the_weight_and_kv_dtypes():
    """--weight-dtype fp8 and --kv-cache-dtype fp8 time the step as the roofline does with
    them; an unknown dtype is a usage error (exit 2)."""
    args = ("step-time", *MODEL, "--decode", "64@4096")
    bf16 = invoke(*args)
    fp8 = invoke(*args, "--weight-dtype", "fp8", "--kv-cache-dtype", "fp8")
    assert bf16.exit_code == 0 and fp8.exit_code == 0, fp8.output
    expected = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm", weight_dtype="fp8",
                            kv_cache_dtype="fp8").duration_shape(BatchShape((), 64, 64 * 4096))
    assert fp8.output.strip() == f"{expected * 1e3:.3f} ms"
    assert float(fp8.output.split()[0]) < float(bf16.output.split()[0])
    bad = invoke(*args, "--weight-dtype", "int4")
    assert bad.exit_code == 2 and "int4" in bad.output
