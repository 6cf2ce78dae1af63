"""Engine keys that go together or not (`kvsched.compat.RULES`): every combination an engine
family cannot honour, or the real engine refuses, or that would leave a key ignored, is one
line naming file, line and field, exit code 2, before anything is written; through a
scenario file, a variant, a fleet's replica override, `--set`, `sweep --set`/`--preemption`,
and `run good.yaml bad.yaml`. Next to each, a valid combination that still runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

WORKLOAD = ("workload: {kind: synthetic, num_requests: 6, arrival: {kind: poisson, rate: 1}, "
            "prompt_len: 40, output_len: 4, priority: 1}\n")


def scenario(engine: str, policy: str = "fcfs", cluster: str | None = None,
             name: str = "combo") -> str:
    """A scenario whose engine is on line 2, policy on line 3, cluster (if any) on line 4."""
    text = f"name: {name}\nengine: {engine}\npolicy: {policy}\n"
    if cluster is not None:
        text += f"cluster: {cluster}\n"
    return text + WORKLOAD


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def refused(result, out: Path | None = None) -> str:
    """The one stderr line of a refused command: exit 2, no traceback, nothing in `out`."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    if out is not None:
        assert files_under(out) == []
    return lines[0]


def runs(result) -> None:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    assert "error" not in result.stderr, result.stderr


# (id, bad scenario, line, field the message names, a word it says, a valid neighbour)
CASES = [
    ("v1-swap", scenario("{preset: vllm_v1, preemption: swap}"), 2, "engine.preemption",
     "no swap", scenario("{preset: vllm_v0, preemption: swap}")),
    ("v1-swap-vllm-spelling", scenario("{preset: vllm_v1, preemption_mode: swap}"), 2,
     "engine.preemption_mode", "recompute", scenario("{preset: vllm_v1, preemption_mode: "
                                                     "recompute}")),
    ("sglang-running-loop", scenario("{preset: sglang, step_order: running_loop}"), 2,
     "engine.step_order", "future_tokens",
     scenario("{preset: sglang, step_order: decode_first}")),
    ("v1-sglang-priority", scenario("{preset: vllm_v1, enable_priority_scheduling: true}",
                                    "priority"), 2, "engine.enable_priority_scheduling",
     "future_tokens", scenario("{preset: sglang, enable_priority_scheduling: true}",
                               "priority")),
    ("chunked-v0-priority-preemption",
     scenario("{preset: vllm_v0, chunked_prefill: true, priority_preemption: true}",
              "priority"), 2, "engine.priority_preemption", "prefill_first",
     scenario("{preset: vllm_v0, priority_preemption: true}", "priority")),
    ("null-block-one-block", scenario("{preset: vllm_v1, num_blocks: 1}"), 2,
     "engine.num_blocks", "null block", scenario("{preset: vllm_v1, num_blocks: 2}")),
    ("more-long-than-partial-prefills",
     scenario("{preset: vllm_v0, chunked_prefill: true, max_num_partial_prefills: 2, "
              "max_long_partial_prefills: 3, long_prefill_token_threshold: 20}"), 2,
     "engine.max_long_partial_prefills", "max_num_partial_prefills",
     scenario("{preset: vllm_v0, chunked_prefill: true, max_num_partial_prefills: 2, "
              "max_long_partial_prefills: 2, long_prefill_token_threshold: 20}")),
    ("partial-prefills-without-threshold",
     scenario("{preset: vllm_v0, chunked_prefill: true, max_num_partial_prefills: 2}"), 2,
     "engine.max_num_partial_prefills", "max_model_len",
     scenario("{preset: vllm_v0, chunked_prefill: true, max_num_partial_prefills: 2, "
              "max_model_len: 4096}")),
    ("partial-prefills-prefill-first",
     scenario("{preset: vllm_v0, max_num_partial_prefills: 2, max_model_len: 256}"), 2,
     "engine.max_num_partial_prefills", "decode_first",
     scenario("{preset: vllm_v0, enable_chunked_prefill: true, max_num_partial_prefills: 2, "
              "max_model_len: 256}")),
    ("budget-below-max-model-len-unchunked",
     scenario("{preset: vllm_v0, max_num_batched_tokens: 512, max_model_len: 2048}"), 2,
     "engine.max_model_len", "vLLM refuses",
     scenario("{preset: vllm_v0, max_num_batched_tokens: 512, max_model_len: 2048, "
              "chunked_prefill: true}")),
    ("budget-below-max-model-len-sglang-spelling",
     scenario("{preset: vllm_v1, chunked_prefill_size: -1, max_model_len: 4096}"), 2,
     "engine.max_model_len", "max_num_batched_tokens 2048",
     scenario("{preset: vllm_v1, chunked_prefill_size: -1, max_model_len: 2048}")),
    ("sglang-key-under-v1", scenario("{preset: vllm_v1, max_prefill_tokens: 4096}"), 2,
     "engine.max_prefill_tokens", "SGLang's",
     scenario("{preset: sglang, max_prefill_tokens: 4096}")),
    ("sglang-conservativeness-under-v1",
     scenario("{preset: vllm_v1, schedule_conservativeness: 0.5}"), 2,
     "engine.schedule_conservativeness", "preset vllm_v1",
     scenario("{preset: sglang, schedule_conservativeness: 0.5}")),
    ("sglang-threshold-under-v0",
     scenario("{preset: vllm_v0, priority_scheduling_preemption_threshold: 2}"), 2,
     "engine.priority_scheduling_preemption_threshold", "preset vllm_v0",
     scenario("{preset: sglang, priority_scheduling_preemption_threshold: 2}")),
    ("v1-gate-under-prefill-first",
     scenario("{preset: vllm_v0, scheduler_reserve_full_isl: false}"), 2,
     "engine.scheduler_reserve_full_isl", "running_loop",
     scenario("{preset: vllm_v1, scheduler_reserve_full_isl: false}")),
    ("no-mixing-under-v1", scenario("{preset: vllm_v1, mix_prefill_decode: false}"), 2,
     "engine.mix_prefill_decode", "always mixes",
     scenario("{preset: lesson, mix_prefill_decode: false}")),
    ("v0-delay-under-v1", scenario("{preset: vllm_v1, delay_factor: 0.5}"), 2,
     "engine.delay_factor", "running_loop", scenario("{preset: vllm_v0, delay_factor: 0.5}")),
    ("v0-accounting-under-v1", scenario("{preset: vllm_v1, prefix_accounting: v0}"), 2,
     "engine.prefix_accounting", "running_loop",
     scenario("{preset: vllm_v0, enable_prefix_caching: true, prefix_accounting: v0}")),
    ("v0-append-rule-under-v1", scenario("{preset: vllm_v1, append_free_block: true}"), 2,
     "engine.append_free_block", "running_loop",
     scenario("{preset: lesson, append_free_block: true}")),
    ("swap-key-under-v1", scenario("{preset: vllm_v1, swapped_fifo: true}"), 2,
     "engine.swapped_fifo", "never swaps",
     scenario("{preset: lesson, preemption: swap, swapped_fifo: true}")),
    *((f"{key}-under-v1", scenario(f"{{preset: vllm_v1, {key}: {value}}}"), 2, f"engine.{key}",
       why, scenario(f"{{preset: vllm_v0, preemption: swap, {key}: {value}}}"))
      for key, value, why in (("swap_prefills", "true", "never swaps"),
                              ("swap_in_front", "true", "never swaps"),
                              ("prefill_past_swapped", "true", "never swaps"),
                              ("readmit_victims", "false", "V0's"))),
    ("async-under-v0", scenario("{preset: vllm_v0, async_scheduling: true}"), 2,
     "engine.async_scheduling", "AsyncScheduler",
     scenario("{preset: vllm_v1, async_scheduling: true}")),
    ("async-under-sglang", scenario("{preset: sglang, async_scheduling: true}"), 2,
     "engine.async_scheduling", "running_loop",
     scenario("{preset: sglang, async_scheduling: false}")),
    ("chunked-v0-key-under-prefill-first",
     scenario("{preset: vllm_v0, swap_in_after_preempt: false}"), 2,
     "engine.swap_in_after_preempt", "decode_first",
     scenario("{preset: vllm_v0, chunked_prefill: true, swap_in_after_preempt: false}")),
    ("random-seed-not-an-integer", scenario("{preset: lesson}", "{name: random, seed: 1.5}"),
     3, "policy", "seed must be an integer",
     scenario("{preset: lesson}", "{name: random, seed: 2}")),
    ("a-million-replicas", scenario("{preset: lesson}", cluster="{replicas: 1000000}"), 4,
     "cluster.replicas", "at most 10,000",
     scenario("{preset: lesson}", cluster="{replicas: 2}")),
    ("a-million-replicas-in-a-fleet",
     scenario("{preset: lesson}", cluster="{replicas: [{count: 2}, {count: 999999}]}"), 4,
     "cluster.replicas", "1,000,001 replicas",
     scenario("{preset: lesson}", cluster="{replicas: [{count: 2}, {count: 3}]}")),
    ("negative-limit", scenario("{max_num_seqs: -1}"), 2, "engine.max_num_seqs", ">= 1",
     scenario("{max_num_seqs: 1}")),
    ("negative-queue-limit", scenario("{max_queued_requests: -3}"), 2,
     "engine.max_queued_requests", ">= 1", scenario("{max_queued_requests: 3}")),
]
IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("name", "bad", "line", "field", "says", "good"), CASES, ids=IDS)
def test_run_refuses_the_combination_before_writing(tmp_path, name, bad, line, field, says,
                                                    good):
    """`run` of the bad file: one line with file:line, the field and what was expected;
    exit 2; nothing under --out. Its valid neighbour runs."""
    path = write(tmp_path, "bad.yaml", bad)
    out = tmp_path / "out"
    message = refused(invoke("run", path, "--out", out), out)
    assert f"{path}:{line}: {field}: " in message
    assert says in message
    runs(invoke("run", write(tmp_path, "good.yaml", good), "--out", tmp_path / "good"))


@pytest.mark.parametrize(("name", "bad", "line", "field", "says", "good"), CASES, ids=IDS)
def test_validate_reports_the_combination(tmp_path, name, bad, line, field, says, good):
    """`validate` calls the bad file an error (exit 2, same line) and the good one ok."""
    bad_path = write(tmp_path, "bad.yaml", bad)
    good_path = write(tmp_path, "good.yaml", good)
    result = invoke("validate", good_path, bad_path)
    assert result.exit_code == 2, result.output
    assert f"ok: {good_path}:" in result.stdout
    errors = [text for text in result.stderr.splitlines() if text.startswith("error: ")]
    assert len(errors) == 1 and f"{bad_path}:{line}: {field}: " in errors[0], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("engine", ["{preset: lesson}", "{preset: vllm_v1}",
                                    "{preset: vllm_v0}", "{preset: vllm_v0, chunked_prefill: true}",
                                    "{preset: sglang}"])
def test_a_run_json_reruns(tmp_path, engine):
    """run.json writes every engine key (another family's at its default): it reruns."""
    import json

    out = tmp_path / "out"
    runs(invoke("run", write(tmp_path, "s.yaml", scenario(engine)), "--out", out))
    record = json.loads((out / "combo" / "base" / "run.json").read_text())
    again = tmp_path / "again.yaml"
    again.write_text(json.dumps(record["resolved"]))
    runs(invoke("validate", again))


def test_a_variant_is_checked_on_its_own(tmp_path):
    """A base that is valid, a variant whose preset cannot honour the base's key: the
    variant is named, and nothing is written."""
    path = write(tmp_path, "s.yaml", "name: s\nengine: {preset: sglang, max_prefill_tokens: 4096}\n"
                 + WORKLOAD + "variants:\n  - {name: sglang}\n"
                 "  - {name: v1, engine: {preset: vllm_v1}}\n")
    out = tmp_path / "out"
    message = refused(invoke("run", path, "--out", out), out)
    assert f"{path}:2: engine.max_prefill_tokens: " in message
    assert "preset vllm_v1" in message and "(variant 'v1')" in message
    fixed = path.read_text().replace("{preset: vllm_v1}", "{preset: vllm_v1, admission_rule: "
                                     "future_tokens, step_order: prefill_first}")
    runs(invoke("run", write(tmp_path, "fixed.yaml", fixed), "--out", out))


def test_a_variants_own_key_is_blamed_on_its_line(tmp_path):
    path = write(tmp_path, "s.yaml", "name: s\nengine: {preset: vllm_v1}\n" + WORKLOAD
                 + "variants:\n  - {name: ok}\n  - {name: swap, engine: {preemption: swap}}\n")
    message = refused(invoke("validate", path))
    assert f"{path}:6: variants[1].engine.preemption: swap cannot run" in message


def test_a_replica_override_is_checked_with_the_variants_engine(tmp_path):
    """A fleet entry's engine keys on top of the variant's: `preemption: swap` alone is
    valid, on a vllm_v1 variant it is not; on a vllm_v0 variant the same fleet runs."""
    fleet = "{replicas: [{count: 1}, {count: 1, engine: {preemption: swap}}]}"
    path = write(tmp_path, "fleet.yaml", scenario("{preset: vllm_v1}", cluster=fleet))
    out = tmp_path / "out"
    message = refused(invoke("run", path, "--out", out), out)
    assert f"{path}:4: cluster.replicas[1].engine.preemption: swap cannot run" in message
    runs(invoke("run", write(tmp_path, "good.yaml", scenario("{preset: vllm_v0}", cluster=fleet)),
                "--out", out))


def test_a_replica_preset_that_cannot_take_the_variants_keys(tmp_path):
    """The override's preset makes the variant's own keys conflict: the preset is blamed."""
    fleet = "{replicas: [{count: 1}, {count: 1, engine: {preset: vllm_v1}}]}"
    path = write(tmp_path, "fleet.yaml", scenario("{preset: sglang}", cluster=fleet))
    message = refused(invoke("validate", path))
    assert f"{path}:4: cluster.replicas[1].engine.preset: admission_rule future_tokens" in message


def test_run_set_is_checked(tmp_path):
    path = write(tmp_path, "s.yaml", scenario("{preset: vllm_v1}"))
    out = tmp_path / "out"
    message = refused(invoke("run", path, "--set", "engine.preemption=swap", "--out", out), out)
    assert f"{path}: --set engine.preemption: swap cannot run" in message
    runs(invoke("run", path, "--set", "engine.preset=vllm_v0", "--set", "engine.preemption=swap",
                "--out", out))


def test_sweep_set_checks_every_point_before_any_runs(tmp_path):
    """The grid's second value cannot run: the sweep refuses before its first point."""
    path = write(tmp_path, "s.yaml", scenario("{preset: vllm_v1}"))
    out = tmp_path / "out"
    message = refused(invoke("sweep", path, "--set", "engine.preemption=recompute,swap",
                             "--out", out), out)
    assert f"{path}: --set engine.preemption: swap cannot run" in message
    message = refused(invoke("sweep", path, "--set", "engine.max_prefill_tokens=100,200",
                             "--out", out), out)
    assert "--set engine.max_prefill_tokens: 100 would be ignored" in message
    runs(invoke("sweep", path, "--set", "engine.preset=vllm_v1,sglang", "--out", out))


def test_sweep_preemption_checks_every_point(tmp_path):
    path = write(tmp_path, "s.yaml", scenario("{preset: vllm_v1}"))
    out = tmp_path / "out"
    message = refused(invoke("sweep", path, "--preemption", "recompute,swap", "--out", out), out)
    assert f"{path}: --preemption engine.preemption: swap cannot run" in message
    v0 = write(tmp_path, "v0.yaml", scenario("{preset: vllm_v0}"))
    runs(invoke("sweep", v0, "--preemption", "recompute,swap", "--out", out))


def test_run_good_and_bad_writes_nothing(tmp_path):
    """`run good.yaml bad.yaml`: the bad file is refused before good's results are written."""
    good = write(tmp_path, "good.yaml", scenario("{preset: vllm_v1}", name="good"))
    bad = write(tmp_path, "bad.yaml", scenario("{preset: sglang, step_order: running_loop}",
                                               name="bad"))
    out = tmp_path / "out"
    message = refused(invoke("run", good, bad, "--out", out), out)
    assert f"{bad}:2: engine.step_order: " in message
    runs(invoke("run", good, "--out", out))
    assert (out / "good" / "summary.csv").exists()


def test_validate_imports_no_user_policy_while_checking(tmp_path):
    """A bad combination beside a user's policy: validate refuses it, the module never runs."""
    (tmp_path / "sidefx.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('RAN').write_text('x')\n"
        "class P:\n    def key(self, request, t):\n        return (t,)\n")
    path = write(tmp_path, "s.yaml", scenario("{preset: vllm_v1, preemption: swap}",
                                              "{name: 'sidefx:P'}"))
    message = refused(invoke("validate", path))
    assert "engine.preemption" in message
    assert not (tmp_path / "RAN").exists()


def test_capacity_refuses_a_negative_limit(tmp_path):
    """An SLO no summary can meet (below 0) is refused before the search; 0 is a limit."""
    path = write(tmp_path, "s.yaml", scenario("{preset: lesson}"))
    out = tmp_path / "out"
    message = refused(invoke("capacity", path, "--slo", "ttft_p99=-1", "--out", out), out)
    assert "--slo: ttft_p99: expected a limit >= 0" in message
    runs(invoke("capacity", path, "--slo", "num_preemptions=0", "--tolerance", "0.5",
                "--out", out))
