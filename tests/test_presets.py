"""Engine presets: data resolved under the keys written beside them, listed by `kvsched presets`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched import EngineConfig, Request, simulate
from kvsched.cli import app
from kvsched.config import StepOrder
from kvsched.preset_engine import engine_config
from kvsched.presets import PRESETS, expand
from kvsched.schema import EngineSpec

SCENARIO = """\
name: tiny
engine: {preset: vllm_v1, num_blocks: 40, block_size: 4, max_num_batched_tokens: 64}
workload:
  kind: inline
  requests:
    - {id: a, prompt_len: 30, output_len: 5}
    - {id: b, prompt_len: 300, output_len: 5, arrival: 1}
    - {id: c, prompt_len: 20, output_len: 50, arrival: 2}
"""


def test_lesson_is_the_default_and_sets_nothing():
    """No preset and `preset: lesson` give today's EngineConfig exactly."""
    assert PRESETS["lesson"].settings == {}
    assert EngineSpec().to_config() == EngineConfig()
    assert engine_config("lesson") == EngineConfig()


def test_keys_beside_the_preset_override_it():
    """The preset fills in what is not written; what is written wins."""
    config = engine_config("vllm_v1", max_num_seqs=7, watermark=0.05)
    assert (config.max_num_seqs, config.watermark) == (7, 0.05)
    assert config.step_order is StepOrder.RUNNING_LOOP and config.null_block
    assert config.max_num_batched_tokens == 2048
    assert expand({"preset": "vllm_v0", "watermark": 0.2})["watermark"] == 0.2


def test_vllm_flag_names_are_accepted():
    """enable_chunked_prefill / preemption_mode mean chunked_prefill / preemption."""
    spec = EngineSpec.model_validate({"enable_chunked_prefill": True,
                                      "preemption_mode": "swap"})
    assert spec.chunked_prefill and spec.preemption == "swap"
    with pytest.raises(ValueError, match="same key and disagree"):
        EngineSpec.model_validate({"enable_chunked_prefill": True, "chunked_prefill": False})


def test_every_preset_builds_and_runs():
    """Each preset is a valid engine that finishes a small workload."""
    requests = [Request(f"r{i}", i, 20 + 7 * i, 10) for i in range(6)]
    for name in PRESETS:
        result = simulate(requests, engine_config(name, num_blocks=60))
        assert result.summary["num_finished"] == 6, name


def test_running_loop_has_no_swap():
    """vLLM V1 preempts by recompute only: swap under running_loop is refused."""
    with pytest.raises(ValueError, match="no swap"):
        engine_config("vllm_v1", preemption="swap")


def test_max_model_len_rejects_with_vllms_message():
    """A prompt of max_model_len tokens or more is rejected at arrival; outputs are capped."""
    requests = [Request("long", 0, 100, 4), Request("edge", 0, 64, 4), Request("ok", 0, 60, 10)]
    result = simulate(requests, engine_config("vllm_v1", max_model_len=64, num_blocks=100))
    by_id = {r.request_id: r for r in result.requests}
    assert by_id["long"].status == "rejected"
    assert by_id["long"].reason.startswith("The decoder prompt (length 100) is longer than")
    assert "plus the number of requested output tokens" in by_id["edge"].reason
    assert by_id["ok"].status == "finished" and by_id["ok"].generated_tokens == 4


def test_null_block_leaves_one_block_unusable():
    """num_blocks=6 under vllm_v1: 5 usable blocks, the step records count 5."""
    result = simulate([Request("a", 0, 16, 2)], engine_config("vllm_v1", num_blocks=6))
    assert {row[10] + row[11] for row in result.steps} == {5}  # blocks used + free


def test_presets_command_lists_every_preset_and_setting():
    """`kvsched presets`: each preset, its engine version and every key it sets."""
    out = CliRunner().invoke(app, ["presets"])
    assert out.exit_code == 0
    for preset in PRESETS.values():
        assert f"{preset.name}: {preset.engine}" in out.stdout
        for key in preset.settings:
            assert key in out.stdout
    assert "vLLM 0.33.0" in out.stdout and "SGLang 0.5.23" in out.stdout


def test_sweep_over_presets_and_run_json_records_them(tmp_path: Path):
    """--set engine.preset=a,b sweeps presets; run.json holds the resolved knobs."""
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO)
    out = CliRunner().invoke(app, ["sweep", str(path), "--set",
                                   "engine.preset=vllm_v0,vllm_v1,sglang", "-o",
                                   str(tmp_path / "out")])
    assert out.exit_code == 0, out.stdout
    assert all(name in out.stdout for name in ("vllm_v0", "vllm_v1", "sglang"))
    out = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "run")])
    assert out.exit_code == 0, out.stdout
    engine = json.loads((tmp_path / "run" / "tiny" / "base" / "run.json").read_text())[
        "resolved"]["engine"]
    assert engine["preset"] == "vllm_v1" and engine["step_order"] == "running_loop"
    assert engine["num_blocks"] == 40 and engine["null_block"] is True


def test_an_unknown_preset_is_one_line_and_exit_2(tmp_path: Path):
    """A bad preset name: one line naming the known ones, exit code 2."""
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.replace("preset: vllm_v1", "preset: vllm_v2"))
    out = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "out")])
    assert out.exit_code == 2
    assert len(out.output.strip().splitlines()) == 1
    assert "vllm_v1" in out.output


def test_shipped_engines_scenario_holds_its_claims():
    """scenarios/engines.yaml: the four presets differ where the expectations say, and vLLM V1
    as `vllm serve` runs it (async scheduling) where async changes TTFT and the step count."""
    from kvsched.runner import run_scenario
    from kvsched.scenario import load_scenario

    path = Path(__file__).resolve().parent.parent / "scenarios" / "engines.yaml"
    scenario_run = run_scenario(load_scenario(path))
    assert len(scenario_run.checks) == 9
    assert all(check.passed for check in scenario_run.checks)
    assert {run.name for run in scenario_run.runs} == {"lesson", "vllm_v0", "vllm_v1", "sglang",
                                                       "vllm_v1_sync", "vllm_serve"}
    configs = {run.name: run.result.config for run in scenario_run.runs}
    assert configs["vllm_serve"].async_scheduling and configs["vllm_v1"].async_scheduling
    assert not configs["vllm_v1_sync"].async_scheduling
    # the variant's batch settings are what vllm serve 0.33 takes on an H100
    from kvsched.timing.serve_defaults import gpu_defaults

    h100 = gpu_defaults("vllm_v1", "h100-sxm")
    assert h100 is not None
    assert (configs["vllm_serve"].max_num_batched_tokens, configs["vllm_serve"].max_num_seqs) == (
        h100.values["max_num_batched_tokens"], h100.values["max_num_seqs"])


# -- vllm_v0's rules, hand-checked -------------------------------------------------------


def thrash(n: int = 12) -> list[Request]:
    return [Request(f"r{i:02d}", i // 3, 8 + (i * 5) % 17, 40 + (i * 7) % 30) for i in range(n)]


def test_v0_warns_on_the_1st_and_every_50th_preemption():
    """vLLM V0 logs its warning when num_cumulative_preemption % 50 == 0 (1st, 51st, ...),
    printing the count after the increment."""
    config = engine_config("vllm_v0", num_blocks=30, block_size=4, watermark=0.0)
    result = simulate(thrash(60), config)
    preempts = [e for e in result.events if e[3] == "preempt"]
    warnings = [e for e in result.events if e[3] == "warning"]
    assert len(preempts) > 100
    assert len(warnings) == (len(preempts) + 49) // 50
    assert [w[4].rsplit("=", 1)[1] for w in warnings] == [
        str(50 * k + 1) for k in range(len(warnings))]
    first = warnings[0]
    assert (first[0], first[2]) == (preempts[0][0], preempts[0][2])
    assert first[4].startswith(f"Sequence group {first[2]} is preempted by "
                               "PreemptionMode.RECOMPUTE mode because there is not enough")
    assert not [e for e in simulate(thrash(60), engine_config(
        "lesson", num_blocks=30, block_size=4)).events if e[3] == "warning"]


def test_v0_recompute_victims_reenter_the_head_in_admission_order():
    """Two victims in one step (d, then c, from the tail) come back c first, then d: V0's
    extendleft of [d, c] keeps their original order."""
    requests = [Request(rid, 0, 1, 3) for rid in "abcd"]
    config = engine_config("vllm_v0", num_blocks=4, block_size=1, watermark=0.0)
    result = simulate(requests, config)
    preempts = [(e[0], e[2]) for e in result.events if e[3] == "preempt"]
    assert preempts[:2] == [(1, "d"), (1, "c")]
    readmitted = [e[2] for e in result.events if e[3] == "admit" and e[0] > 1]
    assert readmitted.index("c") < readmitted.index("d")  # b, preempted at step 2, is ahead


def test_v0_admits_no_prompt_while_a_swapped_request_waits():
    """preemption_mode swap under vllm_v0: no prompt is admitted while a swapped-out request
    waits, and no step both swaps out and in (admit_after_preempt: false; with kvsched's
    newest-first swapped order the victim at the head never fits in its own step anyway)."""
    config = engine_config("vllm_v0", num_blocks=30, block_size=4, watermark=0.0,
                           preemption_mode="swap")
    result = simulate(thrash(30), config)
    by_step: dict[int, set[str]] = {}
    for step, _t, _rid, event, _d in result.events:
        by_step.setdefault(step, set()).add(event)
    assert any("swap_out" in kinds for kinds in by_step.values())
    assert not [s for s, kinds in by_step.items() if {"swap_out", "swap_in"} <= kinds]
    swapped: set[str] = set()
    for step in sorted(by_step):
        events = [e for e in result.events if e[0] == step]
        if any(e[3] == "admit" for e in events):
            assert not swapped, (step, swapped)
        for _s, _t, rid, event, _d in events:
            if event == "swap_out":
                swapped.add(rid)
            elif event == "swap_in":
                swapped.discard(rid)


# -- SGLang's knobs, hand-checked ---------------------------------------------------------


def test_max_queued_requests_rejects_arrivals_that_find_the_queue_full():
    """max_queued_requests=2, one slot: a and b queue at time 0, c finds both still waiting
    (nothing is admitted before the step) and is turned away; d, at step 1, finds only b."""
    requests = [Request(rid, t, 4, 5) for rid, t in [("a", 0), ("b", 0), ("c", 0), ("d", 1)]]
    result = simulate(requests, engine_config("sglang", max_num_seqs=1, max_queued_requests=2))
    status = {r.request_id: r.status for r in result.requests}
    assert status == {"a": "finished", "b": "finished", "c": "rejected", "d": "finished"}
    reason = next(r.reason for r in result.requests if r.request_id == "c")
    assert reason == "The request queue is full."  # SGLang's abort message


def test_lof_serves_the_longest_output_first():
    """SGLang's lof: by -max_new_tokens, ties by arrival."""
    from kvsched import make_policy

    requests = [Request(rid, 0, 4, n) for rid, n in [("s", 2), ("l", 9), ("m", 5), ("l2", 9)]]
    result = simulate(requests, engine_config("sglang", max_num_seqs=1), make_policy("lof"))
    admitted = [e[2] for e in result.events if e[3] == "admit"]
    assert admitted == ["l", "l2", "m", "s"]


def test_sglang_has_one_chunked_request_at_a_time_continued_first():
    """Under sglang (threshold 0) only the last request admitted in a step can be cut, and
    the next step continues it before admitting anyone: at most one is mid-prefill."""
    requests = [Request(f"r{i}", i % 7, 30 + (i * 37) % 200, 5 + i % 9) for i in range(40)]
    run = simulate(requests, engine_config("sglang", max_num_batched_tokens=64, num_blocks=400,
                                           block_size=4), record_batches=True)
    prompt = {r.request_id: r.prompt_len for r in requests}
    done: dict[str, int] = {}  # prefill tokens computed so far
    seen = []  # requests mid-prefill after each step
    for step in sorted({row[0] for row in run.batches}):
        for _step, _time, rid, phase, tokens in (r for r in run.batches if r[0] == step):
            if phase == "prefill":
                done[rid] = done.get(rid, 0) + tokens
        seen.append(sum(0 < n < prompt[rid] for rid, n in done.items()))
    assert max(seen) == 1 and seen.count(1) > 10


def swap_in_order_is_fifo(events) -> bool:
    swapped: list[str] = []
    for _s, _t, rid, event, _d in events:
        if event == "swap_out":
            swapped.append(rid)
        elif event == "swap_in":
            if swapped[0] != rid:
                return False
            swapped.remove(rid)
    return True


def test_v0_swapped_queue_is_first_in_first_out():
    """vLLM V0 appends swap victims to the back of `swapped` and swaps in from its head: the
    earliest swapped out comes back first (the lesson's stack would take the newest)."""
    config = dict(num_blocks=30, block_size=4, watermark=0.0, preemption_mode="swap")
    v0 = simulate(thrash(30), engine_config("vllm_v0", **config))
    assert sum(e[3] == "swap_in" for e in v0.events) > 20
    assert swap_in_order_is_fifo(v0.events)
    stack = simulate(thrash(30), engine_config("vllm_v0", swapped_fifo=False, **config))
    assert not swap_in_order_is_fifo(stack.events)


def test_v0_delay_factor_holds_prompts_back_for_a_multiple_of_the_last_prompt_latency():
    """delay_factor=5 on the step clock: a's prompt step lasted 1, so b (arriving at 1) is
    admitted once it has waited more than 5, at step 7; without it, at step 1. If nothing
    runs, the delay does not apply."""
    requests = [Request("a", 0, 8, 20), Request("b", 1, 8, 3)]
    first = {}
    for delay in (0.0, 5.0):
        result = simulate(requests, engine_config("vllm_v0", delay_factor=delay))
        first[delay] = {r.request_id: r.first_scheduled_time for r in result.requests}
    assert first[0.0] == {"a": 0.0, "b": 1.0}
    assert first[5.0] == {"a": 0.0, "b": 7.0}
    alone = simulate([Request("a", 0, 8, 2), Request("b", 5, 8, 3)],
                     engine_config("vllm_v0", delay_factor=5.0))
    assert [r.first_scheduled_time for r in alone.requests] == [0.0, 5.0]


def test_v0_turns_prompts_away_with_its_own_warnings():
    """vLLM 0.8.5's texts: over min(max_model_len, budget), or blocks past the pool less the
    watermark (NEVER); a prompt of exactly max_model_len runs and produces one token."""
    config = engine_config("vllm_v0", num_blocks=10, block_size=16)
    result = simulate([Request("a", 0, 3000, 4), Request("b", 0, 200, 4)], config)
    reasons = {r.request_id: (r.status, r.reason) for r in result.requests}
    assert reasons == {
        "a": ("rejected", "Input prompt (3000 tokens) is too long and exceeds limit of 2048"),
        "b": ("rejected", "Input prompt (200 tokens) + lookahead slots (0) is too long and "
                          "exceeds the capacity of block_manager")}
    capped = simulate([Request("c", 0, 64, 4), Request("d", 0, 65, 4)],
                      engine_config("vllm_v0", max_model_len=64, num_blocks=40))
    c, d = capped.requests
    assert (c.status, c.generated_tokens) == ("finished", 1)
    assert d.status == "rejected" and d.reason.startswith("The decoder prompt (length 65)")


def test_readme_and_presets_say_the_same_of_each_engine():
    """docs/presets.md's heading for each preset names the same engine and version as `kvsched
    presets`, and claims a check only where the preset does."""
    import re
    from pathlib import Path

    from kvsched.presets import PRESETS

    readme = (Path(__file__).parent.parent / "docs" / "presets.md").read_text(encoding="utf-8")
    headings = dict(re.findall(r"^## `(\w+)`:? ?(.*)$", readme, flags=re.M))
    for name, preset in PRESETS.items():
        heading = headings[name]
        if name != "lesson":
            version = re.search(r"\d+\.\d+(\.\d+)?", preset.engine).group(0)
            assert version in heading, (name, heading)
        claims = "checked" in heading
        assert claims == (preset.exact or bool(preset.checked)), (name, heading)
        if preset.checked:
            assert "SGLang's own classes" in heading and "SGLang's own classes" in preset.checked
