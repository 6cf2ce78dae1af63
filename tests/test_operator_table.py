"""The operator's view (issue 23), through the CLI: the tables lead with vLLM's benchmark
figures, --columns picks them, and vLLM's names are read by --columns, --slo and expect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

SECONDS = """\
name: ops
seed: 4
engine: {max_num_batched_tokens: 512, num_blocks: 200, block_size: 16}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload:
  kind: synthetic
  num_requests: 40
  arrival: {kind: poisson, rate: 5}
  prompt_len: {kind: uniform, low: 20, high: 200}
  output_len: {kind: uniform, low: 5, high: 40}
variants:
  - {name: roomy}
  - {name: tight, engine: {num_blocks: 40}}
"""

STEPS = SECONDS.replace(
    "time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}\n", "")

DEFAULT_HEADERS = ("completed", "starved", "TTFT p50 (s)", "TTFT p99 (s)", "TPOT p99 (s)",
                   "ITL p99 (s)", "output tok/s", "preemptions")


def invoke(*args: str | Path, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(app, [str(a) for a in args])


@pytest.fixture
def seconds(tmp_path: Path) -> Path:
    path = tmp_path / "ops.yaml"
    path.write_text(SECONDS, encoding="utf-8")
    return path


@pytest.fixture
def steps(tmp_path: Path) -> Path:
    path = tmp_path / "ops_steps.yaml"
    path.write_text(STEPS, encoding="utf-8")
    return path


def header_of(stdout: str) -> list[str]:
    """The table's column titles (tabulate's simple format: titles split by 2+ spaces)."""
    line = next(line for line in stdout.splitlines()
                if line.startswith(("variant", "engine.")))
    return [title.strip() for title in line.split("  ") if title.strip()]


def summaries(path: Path, out: Path) -> dict[str, dict]:
    result = invoke("run", path, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    return {row["variant"]: row for row in json.loads(result.stdout)}


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in result.output
    return lines[0]


# -- the default tables ----------------------------------------------------------------------


def test_run_table_leads_with_vllms_benchmark_view(seconds, tmp_path):
    """variant, then vLLM's figures in their order, then the scheduler's, incidents last."""
    result = invoke("run", seconds, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    header = header_of(result.stdout)
    assert header[:len(DEFAULT_HEADERS) + 1] == ["variant", *DEFAULT_HEADERS]
    assert header[-1] == "incidents" and "peak blocks" in header


def test_step_unit_table_says_tokens_per_step(steps, tmp_path):
    result = invoke("run", steps, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    header = header_of(result.stdout)
    assert "TPOT p99 (steps)" in header and "output tok/step" in header


def test_output_throughput_column_shows_the_summary_key(seconds, tmp_path):
    """The output tok/s cells are output_throughput (not throughput, which counts every
    generated token)."""
    figures = summaries(seconds, tmp_path / "json")
    result = invoke("run", seconds, "--out", tmp_path / "out", "--variant", "roomy")
    header = header_of(result.stdout)
    row = next(line for line in result.stdout.splitlines() if line.startswith("roomy "))
    cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
    from kvsched.report import fmt

    assert cells[header.index("output tok/s")] == fmt(figures["roomy"]["output_throughput"])


def test_narrow_terminal_drops_the_schedulers_figures_first(seconds, tmp_path):
    """At 120 columns the scheduler's own figures go before vLLM's view does."""
    result = invoke("run", seconds, "--out", tmp_path / "out", env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    header = header_of(result.stdout)
    assert {"TTFT p50 (s)", "TTFT p99 (s)", "incidents"} <= set(header)
    assert "peak blocks" not in header and "TTFT mean (s)" not in header
    assert "--wide shows them" in result.stdout


def test_sweep_table_leads_with_the_same_view(seconds, tmp_path):
    result = invoke("sweep", seconds, "--blocks", "40,200", "--variant", "roomy",
                    "--out", tmp_path)
    assert result.exit_code == 0, result.output
    header = header_of(result.stdout)
    assert header[:len(DEFAULT_HEADERS) + 2] == ["engine.num_blocks", "variant",
                                                 *DEFAULT_HEADERS]
    assert header[-1] == "incidents"


# -- --columns -------------------------------------------------------------------------------


def test_columns_picks_and_orders(seconds, tmp_path):
    """--columns gives exactly the named columns, in that order, with units."""
    result = invoke("run", seconds, "--out", tmp_path / "out",
                    "--columns", "num_preemptions,tpot_p99,ttft_p99,output_throughput")
    assert result.exit_code == 0, result.output
    assert header_of(result.stdout) == ["variant", "num_preemptions", "tpot_p99 (s)",
                                        "ttft_p99 (s)", "output_throughput (tok/s)"]


def test_columns_on_sweep_follow_the_swept_values(seconds, tmp_path):
    result = invoke("sweep", seconds, "--blocks", "40,200", "--variant", "tight",
                    "--out", tmp_path, "--columns", "p99_ttft_ms,completed")
    assert result.exit_code == 0, result.output
    assert header_of(result.stdout) == ["engine.num_blocks", "variant", "p99_ttft_ms",
                                        "completed"]


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_unknown_column_is_one_line_before_anything_runs(command, seconds, tmp_path):
    args = ["--blocks", "40,200"] if command == "sweep" else []
    result = invoke(command, seconds, *args, "--out", tmp_path / "o", "--columns",
                    "ttft_p99,ttft_p98")
    line = one_error_line(result)
    assert "--columns" in line and "'ttft_p98'" in line and "ttft_p99" in line
    assert not (tmp_path / "o").exists()


def test_std_has_no_kvsched_figure(seconds, tmp_path):
    line = one_error_line(invoke("run", seconds, "--out", tmp_path / "o",
                                 "--columns", "std_ttft_ms"))
    assert "std_ttft_ms" in line and "standard deviation" in line


# -- vLLM's names and their milliseconds -----------------------------------------------------


def test_ms_column_shows_milliseconds(seconds, tmp_path):
    """p99_ttft_ms is ttft_p99 x 1000; completed is num_finished; median_e2el_ms is e2e_p50."""
    figures = summaries(seconds, tmp_path / "json")["tight"]
    result = invoke("run", seconds, "--out", tmp_path / "out", "--variant", "tight",
                    "--columns", "p99_ttft_ms,completed,median_e2el_ms")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("tight "))
    from kvsched.report import fmt

    assert row.split()[1:] == [fmt(figures["ttft_p99"] * 1000), fmt(figures["num_finished"]),
                               fmt(figures["e2e_p50"] * 1000)]


def expect_scenario(base: str, path: Path, lines: str) -> Path:
    path.write_text(base + "expect:\n" + lines, encoding="utf-8")
    return path


def test_expect_on_p99_ttft_ms_is_in_milliseconds(seconds, tmp_path):
    """An expect on p99_ttft_ms passes just above ttft_p99 x 1000 and fails just below."""
    p99 = summaries(seconds, tmp_path / "json")["tight"]["ttft_p99"]
    assert p99 > 0.01
    above, below = p99 * 1000 * 1.01, p99 * 1000 * 0.99
    claim = f"  - {{variant: tight, metric: p99_ttft_ms, op: '<=', value: {above}}}\n"
    path = expect_scenario(SECONDS, tmp_path / "e.yaml", claim)
    passed = invoke("run", path, "--out", tmp_path / "a")
    assert passed.exit_code == 0, passed.output
    assert any(line.startswith("pass ") and "p99_ttft_ms" in line
               for line in passed.stdout.splitlines())
    claim = f"  - {{variant: tight, metric: p99_ttft_ms, op: '<=', value: {below}}}\n"
    path = expect_scenario(SECONDS, tmp_path / "e.yaml", claim)
    failed = invoke("run", path, "--out", tmp_path / "b")
    assert failed.exit_code == 1, failed.output
    assert any(line.startswith("FAIL ") for line in failed.stdout.splitlines())


def test_expect_alias_without_ms(seconds, tmp_path):
    """`completed` is num_finished, unscaled."""
    path = expect_scenario(SECONDS, tmp_path / "e.yaml",
                           "  - {variant: roomy, metric: completed, op: '==', value: 40}\n")
    result = invoke("run", path, "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output


def test_ms_alias_is_refused_for_step_unit_runs(steps, tmp_path):
    """Steps have no milliseconds: --columns, expect and --slo each refuse in one line."""
    line = one_error_line(invoke("run", steps, "--out", tmp_path / "o",
                                 "--columns", "p99_tpot_ms"))
    assert "p99_tpot_ms" in line and "steps" in line
    path = expect_scenario(STEPS, tmp_path / "e.yaml",
                           "  - {variant: roomy, metric: p99_ttft_ms, op: '<', value: 5}\n")
    line = one_error_line(invoke("run", path, "--out", tmp_path / "o"))
    assert "expect" in line and "p99_ttft_ms" in line and "steps" in line
    line = one_error_line(invoke("capacity", steps, "--slo", "p99_ttft_ms=500",
                                 "--out", tmp_path / "o"))
    assert "--slo" in line and "steps" in line
    assert not (tmp_path / "o").exists()


def test_unknown_expect_metric_suggests_a_vllm_name(seconds, tmp_path):
    path = expect_scenario(SECONDS, tmp_path / "e.yaml",
                           "  - {variant: roomy, metric: p99_tft_ms, op: '<', value: 5}\n")
    line = one_error_line(invoke("run", path, "--out", tmp_path / "o"))
    assert "did you mean 'p99_ttft_ms'" in line


def test_slo_alias_in_ms_finds_the_same_capacity(seconds, tmp_path):
    """--slo p99_ttft_ms=500 is --slo ttft_p99=0.5: the same capacity.csv, byte for byte."""
    written = []
    for slo in ("ttft_p99=0.5", "p99_ttft_ms=500"):
        out = tmp_path / slo.split("=")[0]
        result = invoke("capacity", seconds, "--slo", slo, "--variant", "roomy",
                        "--tolerance", "0.1", "--out", out)
        assert result.exit_code == 0, result.output
        written.append((out / "capacity-ops" / "capacity.csv").read_bytes())
    assert written[0] == written[1]
    assert "p99_ttft_ms" in result.stdout and "ttft_p99 <= 0.5" in result.stdout


# -- --json with a failed check --------------------------------------------------------------


def test_json_with_a_failed_check_says_which_on_stderr(seconds, tmp_path):
    """stdout stays JSON; stderr has a line per failed check; exit 1 unless --no-check."""
    path = expect_scenario(SECONDS, tmp_path / "e.yaml",
                           "  - {variant: roomy, metric: num_finished, op: '==', value: 41}\n"
                           "  - {variant: roomy, metric: num_finished, op: '==', value: 40}\n"
                           "  - {variant: tight, metric: p99_ttft_ms, op: '<', value: 0.001}\n")
    result = invoke("run", path, "--out", tmp_path / "o", "--json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert [row["variant"] for row in rows] == ["roomy", "tight"]
    failures = [line for line in result.stderr.splitlines() if "check failed" in line]
    assert len(failures) == 2, result.stderr
    assert failures[0].startswith("check failed: ops/roomy: num_finished == 41; measured 40")
    assert "ops/tight: p99_ttft_ms < 0.001; measured" in failures[1]
    unchecked = invoke("run", path, "--out", tmp_path / "o", "--json", "--no-check")
    assert unchecked.exit_code == 0
    assert json.loads(unchecked.stdout) == rows


def test_json_with_passing_checks_is_quiet_on_stderr(seconds, tmp_path):
    path = expect_scenario(SECONDS, tmp_path / "e.yaml",
                           "  - {variant: roomy, metric: num_finished, op: '==', value: 40}\n")
    result = invoke("run", path, "--out", tmp_path / "o", "--json")
    assert result.exit_code == 0, result.output
    assert "check failed" not in result.stderr
