"""Capacity search: the SLO holds at the rate found and fails one tolerance step above."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.analysis.capacity import SloTarget, holds, run_capacity, run_probe, scaled, search
from kvsched.analysis.sweep import SweepSource, parse_axis
from kvsched.cli import app
from kvsched.errors import ScenarioError
from kvsched.runner import requests_of, run_variant
from kvsched.scenario import load_scenario, load_scenario_text

ROOT = Path(__file__).resolve().parents[1]
POOL60 = ROOT / "scenarios" / "pool60.yaml"

SMALL = """
name: small
seed: 2
engine: {max_num_batched_tokens: 512, num_blocks: 400}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload:
  kind: synthetic
  num_requests: 60
  arrival: {kind: poisson, rate: 5}
  prompt_len: {kind: uniform, low: 20, high: 200}
  output_len: {kind: uniform, low: 5, high: 40}
variants:
  - {name: a}
  - {name: b, engine: {max_num_seqs: 2}}
"""


def source_of(text: str = SMALL) -> SweepSource:
    return SweepSource(text, "small.yaml", ROOT)


def test_pool60_capacity_holds_at_the_answer_and_fails_one_step_above():
    variant = next(v for v in load_scenario(POOL60).variants if v.name == "baseline")
    targets = [SloTarget("ttft_p99", 2.0)]
    tolerance = 0.05
    found = search(variant, targets, tolerance)
    assert found.scale is not None and found.scale_above is not None
    assert math.isclose(found.scale_above, found.scale * (1 + tolerance), rel_tol=1e-9)
    at = run_variant(scaled(variant, found.scale)).summary
    above = run_variant(scaled(variant, found.scale * (1 + tolerance))).summary
    assert holds(at, targets)[0] and at["ttft_p99"] <= 2.0
    assert not holds(above, targets)[0]
    assert found.rate == pytest.approx(2.0 * found.scale)  # pool60 runs at 2 requests/s


def test_a_trace_scales_by_its_time_scale():
    text = SMALL.replace("""  kind: synthetic
  num_requests: 60
  arrival: {kind: poisson, rate: 5}
  prompt_len: {kind: uniform, low: 20, high: 200}
  output_len: {kind: uniform, low: 5, high: 40}""",
                         "  {kind: trace, format: azure, "
                         "path: scenarios/traces/AzureLLMInferenceTrace_conv.csv, limit: 80}"
                         ).replace("{max_num_batched_tokens: 512, num_blocks: 400}",
                                   "{max_num_batched_tokens: 16384, num_blocks: 4000}")
    variant = load_scenario_text(text, "t.yaml", ROOT).variants[0]
    twice = scaled(variant, 2.0)
    assert twice.spec.workload.time_scale == 0.5
    base = [r.arrival_time for r in requests_of(variant)]
    fast = [r.arrival_time for r in requests_of(twice)]
    assert fast == pytest.approx([t / 2 for t in base])
    found = search(variant, [SloTarget("ttft_p99", 0.5)], 0.1)
    assert found.scale is not None


def test_every_variant_and_grid_point_gets_an_answer():
    axis = parse_axis("--blocks", "engine.num_blocks", "200,400")
    results = run_capacity(source_of(), [SloTarget("ttft_p99", 0.5)], [axis], tolerance=0.1)
    assert [(r.point["engine.num_blocks"], r.variant) for r in results] == [
        (200, "a"), (200, "b"), (400, "a"), (400, "b")]
    assert all(r.scale is not None for r in results)
    # Two sequences at a time serve fewer requests per second within the same SLO.
    by = {(r.point["engine.num_blocks"], r.variant): r.rate for r in results}
    assert by[(400, "b")] <= by[(400, "a")]


def test_unknown_slo_key_is_refused_before_running():
    with pytest.raises(ScenarioError, match="unknown summary key 'tpot_p999'"):
        run_capacity(source_of(), [SloTarget("tpot_p999", 0.1)])
    with pytest.raises(ScenarioError, match="METRIC=LIMIT"):
        SloTarget.parse("ttft_p99")


def test_an_unscalable_workload_is_refused():
    text = SMALL.replace("arrival: {kind: poisson, rate: 5}", "arrival: {kind: all_at_once}")
    with pytest.raises(ScenarioError, match="scales the arrival rate"):
        run_capacity(source_of(text), [SloTarget("ttft_p99", 1)])


def test_capacity_command_writes_capacity_csv(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    result = CliRunner().invoke(app, ["capacity", str(path), "--slo", "ttft_p99=0.5",
                                      "--slo", "e2e_p99=5", "--tolerance", "0.1",
                                      "--out", str(tmp_path), "--plot"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "capacity-small"
    text = (folder / "capacity.csv").read_text().splitlines()
    assert text[0].startswith("variant,rate,scale,rate_above,scale_above,ttft_p99,")
    assert len(text) == 3
    assert (folder / "capacity.png").exists() and (folder / "capacity_probes.csv").exists()


def test_capacity_command_bad_slo_is_one_line_exit_2(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    result = CliRunner().invoke(app, ["capacity", str(path), "--slo", "tpot_p999=0.1",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_two_processes_write_the_same_records_as_one(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    written = []
    for jobs in ("1", "2"):
        result = CliRunner().invoke(app, ["capacity", str(path), "--slo", "ttft_p99=0.5",
                                          "--slo", "e2e_mean=2", "--tolerance", "0.05",
                                          "-j", jobs, "--out", str(tmp_path / jobs)])
        assert result.exit_code == 0, result.output
        folder = tmp_path / jobs / "capacity-small"
        written.append([(folder / name).read_bytes()
                        for name in ("capacity.csv", "capacity_probes.csv")])
    assert written[0] == written[1]
    assert len(written[0][0].splitlines()) == 3  # a header and both variants


ROOFLINE = SMALL.replace(
    "time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}",
    "time: {kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm}")


def test_probes_skip_utilisation_unless_an_slo_reads_it():
    """A probe leaves MFU/MBU and the ITL histogram out with the same SLO figures; an SLO
    on mbu_mean or itl_p99 still gets its value."""
    variant = load_scenario_text(ROOFLINE, "roofline.yaml", ROOT).variants[0]
    plain = run_probe(variant, [SloTarget("ttft_p99", 5.0)], 1.0, 5.0)
    mixed = run_probe(variant, [SloTarget("ttft_p99", 5.0), SloTarget("mbu_mean", 1.0),
                                SloTarget("itl_p99", 1.0)], 1.0, 5.0)
    full = run_variant(variant).summary
    assert plain.values == (full["ttft_p99"],) and mixed.values[0] == full["ttft_p99"]
    assert mixed.values[1] == full["mbu_mean"] and 0 < full["mbu_mean"] <= 1
    assert mixed.values[2] == full["itl_p99"] and full["itl_p99"] > 0
