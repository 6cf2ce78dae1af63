"""`vllm serve`'s batch defaults by GPU (vLLM 0.33.0 `EngineArgs.get_batch_defaults`): the
`vllm_v1` preset takes them when the time model names the GPU, under the keys written, and
says where they came from (validate, run's stderr, run.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_time_inputs import write_profiles
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.presets import VLLM_SERVE_TIERS
from kvsched.scenario import load_scenario
from kvsched.timing.serve_defaults import GIB, tier_for

MODEL = "meta-llama/Llama-3.1-8B"


def write(tmp_path: Path, engine: dict, time: dict | None = None, **more) -> Path:
    scenario = {"name": "sd", "engine": engine,
                "time": time or {"kind": "roofline", "model": MODEL, "gpu": "h100-sxm"},
                "workload": {"kind": "synthetic", "num_requests": 20, "prompt_len": 300,
                             "output_len": 20, "arrival": {"kind": "poisson", "rate": 5}},
                **more}
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    return path


def batch(path: Path, variant: int = 0, *assignments: str) -> tuple[int, int]:
    spec = load_scenario(path, assignments).variants[variant].spec
    return spec.engine.max_num_batched_tokens, spec.engine.max_num_seqs


SERVE = {"h100-sxm": (8192, 1024), "h100-pcie": (8192, 1024), "h200": (8192, 1024),
         "a100-80gb": (2048, 256), "a100-40gb": (2048, 256), "l40s": (2048, 256),
         "a40": (2048, 256)}
OFFLINE = {"h100-sxm": (16384, 1024), "h100-pcie": (16384, 1024), "h200": (16384, 1024),
           "a100-80gb": (8192, 256), "a100-40gb": (8192, 256), "l40s": (8192, 256),
           "a40": (8192, 256)}


@pytest.mark.parametrize("gpu", sorted(SERVE))
def test_each_catalogued_gpu_takes_vllm_serves_defaults(tmp_path, gpu):
    """vLLM's table: >= 70 GiB and not an A100 8192/1024 (offline 16384/1024); an A100 of
    80 GB, like every smaller GPU, 2048/256 (offline 8192/256)."""
    time = {"kind": "roofline", "model": MODEL, "gpu": gpu}
    assert batch(write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000}, time)) == SERVE[gpu]
    offline = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000, "usage": "offline"},
                    time)
    assert batch(offline) == OFFLINE[gpu]


def test_the_largest_tier_and_the_a100_exception():
    """A B200-sized device (179 GiB as CUDA counts it) takes the largest tier; vLLM tests the
    name for 'a100' case-insensitively, so an 80 GB A100 stays on the small tier."""
    assert tier_for(VLLM_SERVE_TIERS, "b200", 179 * GIB).values["serve"] == {
        "max_num_batched_tokens": 16384, "max_num_seqs": 1024}
    assert tier_for(VLLM_SERVE_TIERS, "NVIDIA A100-SXM4-80GB", 79 * GIB).min_gib == 0
    assert tier_for(VLLM_SERVE_TIERS, "h100", 69.9 * GIB).min_gib == 0
    assert tier_for(VLLM_SERVE_TIERS, "h100", 70 * GIB).min_gib == 70


def test_without_a_gpu_the_preset_keeps_the_scheduler_classs_defaults(tmp_path):
    """Steps or a fitted linear model name no GPU: SchedulerConfig's 2048 and 128."""
    for time in ({"kind": "steps"}, {"kind": "linear", "base": 0.01}):
        assert batch(write(tmp_path, {"preset": "vllm_v1"}, time)) == (2048, 128)


@pytest.mark.parametrize("preset", ["lesson", "vllm_v0", "sglang"])
def test_presets_without_a_gpu_table_do_not_change(tmp_path, preset):
    on_steps = batch(write(tmp_path, {"preset": preset}, {"kind": "steps"}))
    assert batch(write(tmp_path, {"preset": preset, "num_blocks": 4000})) == on_steps


def test_written_keys_win_in_the_file_in_a_variant_and_in_set(tmp_path):
    path = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000, "max_num_seqs": 64},
                 variants=[{"name": "a"}, {"name": "b", "engine": {"max_num_batched_tokens": 512}}])
    assert batch(path, 0) == (8192, 64)
    assert batch(path, 1) == (512, 64)
    assert batch(path, 0, "engine.max_num_batched_tokens=1024") == (1024, 64)
    sglang_spelling = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000,
                                       "max_running_requests": 32})
    assert batch(sglang_spelling) == (8192, 32)


def test_the_budget_follows_max_model_len_as_vllm_clamps_it(tmp_path):
    """A default budget is at most max_num_seqs x max_model_len and, with chunked prefill
    off, at least max_model_len."""
    short = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000, "max_model_len": 6,
                             "max_num_seqs": 1000})
    assert batch(short) == (6000, 1000)
    unchunked = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000,
                                 "max_model_len": 10000, "enable_chunked_prefill": False})
    assert batch(unchunked) == (10000, 1024)


def test_validate_run_and_run_json_say_where_the_values_came_from(tmp_path):
    path = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000, "max_num_seqs": 64})
    runner = CliRunner()
    shown = runner.invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    assert ("  base: engine.max_num_batched_tokens 8192: vllm serve's default on h100-sxm "
            in shown.stdout), shown.stdout
    assert "engine.max_num_seqs" not in shown.stdout  # written: nothing to explain
    out = tmp_path / "out"
    ran = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    assert "sd/base: engine.max_num_batched_tokens 8192: vllm serve's default" in ran.stderr
    record = json.loads((out / "sd" / "base" / "run.json").read_text(encoding="utf-8"))
    assert list(record["engine_defaults"]) == ["engine.max_num_batched_tokens"]
    assert record["engine_defaults"]["engine.max_num_batched_tokens"].startswith(
        "8192: vllm serve's default on h100-sxm (")
    assert "get_batch_defaults" in record["engine_defaults"]["engine.max_num_batched_tokens"]
    assert record["resolved"]["engine"]["max_num_batched_tokens"] == 8192
    assert record["resolved"]["engine"]["max_num_seqs"] == 64


def test_a_rerun_of_run_json_gives_the_same_engine(tmp_path):
    """run.json's resolved scenario writes the defaults out: rerun elsewhere, it is the same
    engine (and says no value came from a GPU table)."""
    path = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000})
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["run", str(path), "--out", str(out)]).exit_code == 0
    record = json.loads((out / "sd" / "base" / "run.json").read_text(encoding="utf-8"))
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(record["resolved"]), encoding="utf-8")
    assert batch(again) == (8192, 1024)
    shown = CliRunner().invoke(app, ["validate", str(again)])
    assert "default on" not in shown.stdout


def test_a_fleet_replica_on_another_gpu_takes_its_own_defaults(tmp_path):
    a100 = {"kind": "roofline", "model": MODEL, "gpu": "a100-80gb"}
    path = write(tmp_path, {"preset": "vllm_v1", "num_blocks": 4000},
                 cluster={"replicas": [{"count": 1}, {"count": 1, "time": a100},
                                       {"count": 1, "time": a100,
                                        "engine": {"max_num_seqs": 8}}]})
    from kvsched.schema import replica_engines

    spec = load_scenario(path).variants[0].spec
    assert [(e.max_num_batched_tokens, e.max_num_seqs) for e in replica_engines(spec)] == [
        (8192, 1024), (2048, 256), (2048, 8)]
    shown = CliRunner().invoke(app, ["validate", str(path)])
    assert ("cluster.replicas[1].engine.max_num_batched_tokens 2048, cluster.replicas[1]."
            "engine.max_num_seqs 256, cluster.replicas[2].engine.max_num_batched_tokens 2048: "
            "vllm serve's default on a100-80gb") in shown.stdout, shown.stdout


def test_a_profiled_time_model_with_its_gpu(tmp_path):
    folder = write_profiles(tmp_path / "prof")
    time = {"kind": "profiled", "profiles": str(folder), "model": "meta-llama/Llama-2-7b-hf",
            "gpu": "h100-sxm"}
    assert batch(write(tmp_path, {"preset": "vllm_v1"}, time)) == (8192, 1024)
    del time["gpu"]
    assert batch(write(tmp_path, {"preset": "vllm_v1"}, time)) == (2048, 128)


@pytest.mark.parametrize(("engine", "time", "field", "says"), [
    ({"preset": "vllm_v1", "usage": "api"}, None, "engine.usage",
     "unknown value 'api'; expected one of: serve, offline"),
    ({"preset": "vllm_v1"}, {"kind": "profiled", "profiles": "p", "model": MODEL,
                             "gpu": "h101"}, "time.gpu", "unknown GPU 'h101'"),
])
def test_bad_usage_or_gpu_is_one_line(tmp_path, engine, time, field, says):
    path = write(tmp_path, engine, time)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"{field}: " in line and says in line, line


def test_presets_lists_the_gpu_table():
    shown = CliRunner().invoke(app, ["presets"]).stdout
    assert (">= 160 GiB: 16384/1024; >= 70 GiB and not an A100: 8192/1024 (offline 16384/1024); "
            "under 70 GiB, or an A100: 2048/256 (offline 8192/256)") in shown


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpu=st.sampled_from(sorted(SERVE)), usage=st.sampled_from(["serve", "offline"]),
       tokens=st.one_of(st.none(), st.integers(16, 100_000)),
       seqs=st.one_of(st.none(), st.integers(1, 5000)))
def test_a_written_value_always_wins(tmp_path, gpu, usage, tokens, seqs):
    engine: dict = {"preset": "vllm_v1", "num_blocks": 4000, "usage": usage}
    if tokens is not None:
        engine["max_num_batched_tokens"] = tokens
    if seqs is not None:
        engine["max_num_seqs"] = seqs
    got = batch(write(tmp_path, engine, {"kind": "roofline", "model": MODEL, "gpu": gpu}))
    table = (SERVE if usage == "serve" else OFFLINE)[gpu]
    assert got == (table[0] if tokens is None else tokens, table[1] if seqs is None else seqs)
