"""Time models and hardware through the CLI: every error names the file and the field, a
profile folder is read by `validate`, a fleet's replica sizes its own pool, a model that
cannot fit warns, a fine-tune's id resolves to its base, and a near-miss GPU is suggested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.cluster.run import replica_specs
from kvsched.scenario import load_scenario
from kvsched.timing.hardware import load_model
from kvsched.timing.kvpool import kv_pool_blocks
from kvsched.timing.profiled import DENSE_OPS

WORKLOAD = ("workload: {kind: synthetic, num_requests: 20, arrival: {kind: poisson, rate: 5}, "
            "prompt_len: 200, output_len: 20}\n")
ROOF8B = "{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm, tp: 1}"


def write(folder: Path, body: str) -> Path:
    path = folder / "s.yaml"
    path.write_text("name: t\n" + WORKLOAD + body)
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("time", "field", "says"), [
    ("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm, tp: 3}", "time.tp",
     "tp 3 does not split meta-llama/Llama-3.1-8B's 32 heads"),
    ("{kind: roofline, model: meta-llama/Nope-8B, gpu: h100-sxm}", "time.model",
     "unknown model 'meta-llama/Nope-8B'"),
    ("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100}", "time.gpu",
     "unknown GPU 'h100' (did you mean h100-sxm or h100-pcie?)"),
])
@pytest.mark.parametrize("pool", ["auto", "1000"])
def test_time_errors_name_the_file_line_and_field(tmp_path, time, field, says, pool):
    """With `num_blocks: auto` too (the pool is sized before the fields are checked: an
    unknown model was reported at line 1 with no field)."""
    path = write(tmp_path, f"engine: {{preset: vllm_v1, num_blocks: {pool}}}\ntime: {time}\n")
    for command in (["validate", path], ["run", path, "--out", tmp_path / "out"]):
        line = one_error(invoke(*command))
        assert line.startswith(f"error: {path}:4: {field}: {says}"), line
    assert not (tmp_path / "out").exists()


def test_a_tp_that_splits_the_model_is_accepted(tmp_path):
    path = write(tmp_path, f"engine: {{preset: vllm_v1, num_blocks: auto}}\n"
                           f"time: {ROOF8B.replace('tp: 1', 'tp: 8')}\n")
    assert invoke("validate", path).exit_code == 0


def test_tp_rule_follows_kv_heads():
    """8 KV heads split 1, 2, 4, 8 ways and replicate for 16 and 32; 40 heads at tp 20 would
    need 8 KV heads to replicate 2.5 times."""
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert [tp for tp in range(1, 33) if llama.tp_problem(tp) is None] == [1, 2, 4, 8, 16, 32]


@pytest.mark.parametrize(("given", "base"), [
    ("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Meta-Llama-3-8B"),
    ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    ("META-LLAMA/LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B")])
def test_a_fine_tune_resolves_to_its_base(given, base):
    assert load_model(given).name == base


def test_an_unrelated_name_is_still_unknown():
    with pytest.raises(ValueError, match="unknown model 'acme/Widget-9B'"):
        load_model("acme/Widget-9B")


def fleet(tp: int, override: str = "") -> str:
    return (f"engine: {{preset: vllm_v1, num_blocks: auto}}\ntime: {ROOF8B}\n"
            f"cluster: {{router: round_robin, replicas: [{{count: 1}}, {{count: 2, {override}"
            f"time: {{kind: roofline, model: meta-llama/Llama-3.1-70B, gpu: a100-40gb, "
            f"tp: {tp}}}}}]}}\n")


def test_a_fleet_replica_sizes_its_own_pool(tmp_path):
    """The 70B replicas on A100-40GB get their own pool, not the 8B/H100 one."""
    path = write(tmp_path, fleet(8))
    specs = replica_specs(load_scenario(path).variants[0].spec)
    # each at vllm serve's defaults for its GPU: 2048/256 on an A100, 8192/1024 on an H100
    own = kv_pool_blocks("meta-llama/Llama-3.1-70B", "a100-40gb", 8, 16,
                         max_num_batched_tokens=2048, max_num_seqs=256)
    base = kv_pool_blocks("meta-llama/Llama-3.1-8B", "h100-sxm", 1, 16,
                          max_num_batched_tokens=8192, max_num_seqs=1024)
    assert [s.engine.num_blocks for s in specs] == [base, own, own]
    assert own != base
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output
    assert f"cluster.replicas[1]: {own:,} blocks for meta-llama/Llama-3.1-70B on 8 x a100-40gb" \
        in result.stdout


def test_a_fleet_replica_that_cannot_hold_its_model_is_one_line(tmp_path):
    path = write(tmp_path, fleet(2))
    line = one_error(invoke("validate", path))
    assert line.startswith(f"error: {path}:5: cluster.replicas[1]: meta-llama/Llama-3.1-70B "
                           f"does not fit on 2 x a100-40gb"), line


def test_a_fixed_pool_keeps_its_size_in_a_fleet(tmp_path):
    path = write(tmp_path, fleet(8, "engine: {num_blocks: 500}, "))
    specs = replica_specs(load_scenario(path).variants[0].spec)
    assert [s.engine.num_blocks for s in specs][1:] == [500, 500]


def test_a_model_that_does_not_fit_with_a_fixed_pool_warns(tmp_path):
    path = write(tmp_path, "engine: {preset: vllm_v1, num_blocks: 2000}\ntime: {kind: roofline, "
                           "model: meta-llama/Llama-3.1-70B, gpu: a100-40gb}\n")
    result = invoke("validate", path)
    assert result.exit_code == 0
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert "time: meta-llama/Llama-3.1-70B does not fit on 1 x a100-40gb" in warning
    assert "pool of 2,000 blocks" in warning
    fits = write(tmp_path, f"engine: {{preset: vllm_v1, num_blocks: 2000}}\ntime: {ROOF8B}\n")
    assert "warning" not in invoke("validate", fits).stderr


def write_profiles(folder: Path, *, mlp_cell: str = "0.002", attention_time: str = "0.01",
                   drop: str | None = None) -> Path:
    folder.mkdir(exist_ok=True)
    columns = ["num_tokens", *DENSE_OPS]
    columns = [c for c in columns if c != drop]
    rows = [",".join(columns)] + [
        ",".join(str(tokens) if c == "num_tokens" else (mlp_cell if tokens == 64 else "0.001")
                 for c in columns) for tokens in (1, 64, 512)]
    (folder / "mlp.csv").write_text("\n".join(rows) + "\n")
    (folder / "attention.csv").write_text(
        "kind,batch_size,prefill_chunk_size,kv_cache_size,median_ms\n"
        f"prefill,1,100,0,{attention_time}\nprefill,1,200,0,0.03\ndecode,1,0,100,0.01\n"
        "decode,8,0,100,0.02\n")
    return folder


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"drop": "num_tokens"}, "mlp.csv: no column 'num_tokens'"),
    ({"drop": "mlp_up_proj"}, "mlp.csv: no column for mlp_up_proj"),
    ({"mlp_cell": "fast"}, "mlp.csv line 3: column 'input_layernorm': expected a finite number "
                           ">= 0, got 'fast'"),
    ({"mlp_cell": "-0.5"}, "mlp.csv line 3: column 'input_layernorm': expected a finite number"),
    ({"attention_time": "-1"}, "attention.csv line 2: column 'median_ms': expected a finite"),
    ({"attention_time": "inf"}, "attention.csv line 2: column 'median_ms': expected a finite"),
])
def test_validate_reads_a_profile_folder(tmp_path, kwargs, says):
    """A missing column, text or a negative time: one line naming the scenario's field and
    the CSV's line (they gave AttributeError, ValueError or negative TTFTs at run time)."""
    folder = write_profiles(tmp_path / "prof", **kwargs)
    path = write(tmp_path, f"time: {{kind: profiled, profiles: {folder}, "
                           f"model: meta-llama/Llama-2-7b-hf}}\n")
    for command in (["validate", path], ["run", path, "--out", tmp_path / "out"]):
        line = one_error(invoke(*command))
        assert line.startswith(f"error: {path}:3: time.profiles: {folder}/"), line
        assert says in line, line
    assert not (tmp_path / "out").exists()


def test_a_good_profile_folder_runs(tmp_path):
    folder = write_profiles(tmp_path / "prof")
    path = write(tmp_path, f"time: {{kind: profiled, profiles: {folder}, "
                           f"model: meta-llama/Llama-2-7b-hf}}\n")
    assert invoke("validate", path).exit_code == 0
    result = invoke("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "t" / "base" / "summary.json").read_text())
    assert summary["ttft_p50"] > 0


@pytest.mark.parametrize(("key", "value"), [("hidden_size", 0), ("num_hidden_layers", -2),
                                            ("num_key_value_heads", 0), ("head_dim", -1),
                                            ("vocab_size", True), ("num_key_value_heads", 5)])
def test_fit_linear_refuses_a_config_with_bad_sizes(tmp_path, key, value):
    config = {"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1024,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000}
    good = tmp_path / "good.json"
    good.write_text(json.dumps(config))
    assert invoke("fit-linear", "--model", good, "--gpu", "h100-sxm").exit_code == 0
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**config, key: value}))
    line = one_error(invoke("fit-linear", "--model", bad, "--gpu", "h100-sxm"))
    assert str(bad) in line and (key in line or "num_attention_heads" in line), line


def test_a_fleet_replica_that_cannot_fit_warns_with_its_merged_pool(tmp_path):
    """The warning reads the replica's engine as it runs (the variant's keys under the
    override's), not the override alone."""
    path = write(tmp_path, f"engine: {{preset: vllm_v1, num_blocks: 3000}}\ntime: {ROOF8B}\n"
                           "cluster: {router: round_robin, replicas: [{count: 1}, {count: 1, "
                           "engine: {max_num_seqs: 8}, time: {kind: roofline, "
                           "model: meta-llama/Llama-3.1-70B, gpu: a100-40gb}}]}\n")
    result = invoke("validate", path)
    assert result.exit_code == 0, result.output
    [warning] = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert "cluster.replicas[1].time: meta-llama/Llama-3.1-70B does not fit" in warning
    assert "pool of 3,000 blocks" in warning
