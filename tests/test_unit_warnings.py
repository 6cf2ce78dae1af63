"""Unit slips (a step time over 10 s, an SLO in milliseconds) are warnings naming the field, from
`validate` and from `run`, on stderr; they never stop the run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.scenario import load_scenario_text
from kvsched.schema import unit_warnings

BASE = """\
name: slip
engine: {{max_num_batched_tokens: 256, num_blocks: 100, block_size: 16}}
time: {time}
{extra}
workload: {{kind: synthetic, num_requests: 3, arrival: {{kind: all_at_once}}, prompt_len: 20,
           output_len: 3}}
"""
CONSTANT = "{kind: constant, step_time: 0.02}"


def warnings_of(time: str, extra: str = "") -> list[str]:
    loaded = load_scenario_text(BASE.format(time=time, extra=extra), "slip.yaml", ".")
    return unit_warnings(loaded.variants[0].spec)


@pytest.mark.parametrize(("time", "extra", "field"), [
    ("{kind: constant, step_time: 25}", "", "time.step_time"),
    ("{kind: linear, base: 20}", "", "time.base"),
    ("{kind: linear, base: 0.01, per_prefill_token: 0.1}", "", "time.per_prefill_token"),
    (CONSTANT, "slo: {ttft: 5000}", "slo.ttft"),
    (CONSTANT, "slo: {tpot: 0.05, e2e: 30000}", "slo.e2e"),
    (CONSTANT, "slo: {ttft: 500}", "slo.ttft"),
    (CONSTANT, "slo: {tpot: 50}", "slo.tpot"),
    (CONSTANT, "slo: {ttft: 1}\nadmission: {ttft_slo: 4000}", "admission.ttft_slo"),
])
def test_each_slip_names_its_field(time, extra, field):
    """One warning, starting with the field's path."""
    [warning] = warnings_of(time, extra)
    assert warning.startswith(f"{field}: ")


def test_plausible_values_and_step_clock_slos_are_quiet():
    """Seconds-scale values pass; on the step clock an SLO of 5000 steps is fine."""
    assert warnings_of(CONSTANT, "slo: {ttft: 2, tpot: 0.1, e2e: 600}") == []
    assert warnings_of("{kind: steps}", "slo: {ttft: 5000}") == []
    assert warnings_of("{kind: linear, base: 0.01, per_prefill_token: 0.001}") == []


def test_run_prints_them_on_stderr_and_runs(tmp_path):
    """`kvsched run` warns once per scenario, on stderr, and still writes the records."""
    path = tmp_path / "slip.yaml"
    path.write_text(BASE.format(time="{kind: constant, step_time: 25}", extra="slo: {e2e: 9000}"))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert f"warning: {path}: time.step_time: 25 s" in result.stderr
    assert f"warning: {path}: slo.e2e: 9000 s is over an hour" in result.stderr
    assert "warning" not in result.stdout
    assert (tmp_path / "out" / "slip" / "summary.csv").exists()


def test_run_prints_the_pool_it_derived(tmp_path):
    """num_blocks: auto: `kvsched run` names the pool it derived, for the variants it runs."""
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = tmp_path / "auto.yaml"
    path.write_text(
        "name: auto\nengine: {num_blocks: auto}\n"
        "time: {kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm}\n"
        "workload: {kind: inline, requests: [{arrival: 0, prompt_len: 10, output_len: 3}]}\n"
        "variants: [{name: a}, {name: b, engine: {block_size: 32}}]\n")
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o"),
                                      "--variant", "b"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "num_blocks: auto =" in line]
    assert len(lines) == 1 and lines[0].startswith("auto/b:")
