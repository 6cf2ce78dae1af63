"""Scenario `time:` kinds roofline and profiled, and the unit-slip warning on step times."""

from __future__ import annotations

import pytest
from test_profiled import write_compact
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.errors import KvschedError
from kvsched.runner import time_model_of
from kvsched.scenario import load_scenario_text
from kvsched.schema import unit_warnings
from kvsched.timing.kvpool import kv_pool_blocks
from kvsched.timing.profiled import ProfiledStep
from kvsched.timing.roofline import RooflineStep

BASE = """\
name: t
engine: {{max_num_batched_tokens: 512, num_blocks: 400, block_size: 32}}
time: {time}
workload: {{kind: synthetic, num_requests: 5, arrival: {{kind: all_at_once}}, prompt_len: 100,
           output_len: 5}}
"""


def scenario(time: str, tmp_path=None):
    return load_scenario_text(BASE.format(time=time), "t.yaml", tmp_path or ".")


def test_a_roofline_time_builds_the_roofline_with_the_engine_block_size():
    loaded = scenario("{kind: roofline, model: meta-llama/Llama-3.1-70B, gpu: H100-sxm, tp: 4}")
    model = time_model_of(loaded.variants[0].spec)
    assert isinstance(model, RooflineStep)
    assert (model.tp, model.block_size, model.gpu.name) == (4, 32, "h100-sxm")  # type: ignore


@pytest.mark.parametrize(("time", "message"), [
    ("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: b200}",
     "unknown GPU 'b200' (did you mean h200?); known:"),
    ("{kind: roofline, model: llama-9, gpu: a40}", "unknown model 'llama-9'; known:"),
    ("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: a40, tpp: 2}", "tpp"),
    ("{kind: profiled, profiles: p, model: nope}", "unknown model 'nope'"),
])
def test_bad_time_specs_are_one_line_errors(time, message):
    with pytest.raises(KvschedError) as info:
        scenario(time)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_tp_that_does_not_divide_the_heads_is_an_input_error():
    """Refused when the file is loaded (so by `validate`), naming the field and its line."""
    with pytest.raises(KvschedError, match=r"t.yaml:3: time.tp: tp 3 does not split .* "
                                           r"expected one of 1, 2, 4, 8, 16, 32$"):
        scenario("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: a40, tp: 3}")
    loaded = scenario("{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: a40, tp: 4}")
    assert time_model_of(loaded.variants[0].spec).tp == 4


def test_a_profiled_time_reads_the_folder(tmp_path):
    folder = write_compact(tmp_path / "prof")
    loaded = scenario(f"{{kind: profiled, profiles: {folder}, model: meta-llama/Llama-2-7b-hf}}")
    assert isinstance(time_model_of(loaded.variants[0].spec), ProfiledStep)


def test_a_step_time_in_milliseconds_by_mistake_is_a_warning_not_an_error(tmp_path):
    loaded = scenario("{kind: constant, step_time: 25}")
    [warning] = unit_warnings(loaded.variants[0].spec)
    assert warning.startswith("time.step_time: 25 s per step") and "0.025" in warning
    assert unit_warnings(scenario("{kind: constant, step_time: 0.025}").variants[0].spec) == []
    path = tmp_path / "slip.yaml"
    path.write_text(BASE.format(time="{kind: constant, step_time: 25}"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert f"warning: {path}: time.step_time: 25 s" in result.output


AUTO = """\
name: auto
engine: {{num_blocks: auto, block_size: 16{extra}}}
time: {{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm, tp: {tp}}}
workload: {{kind: synthetic, num_requests: 5, arrival: {{kind: all_at_once}}, prompt_len: 100,
           output_len: 5}}
"""


def test_num_blocks_auto_is_the_pool_of_the_roofline_gpus():
    loaded = load_scenario_text(AUTO.format(extra="", tp=1), "a.yaml", ".")
    blocks = kv_pool_blocks("meta-llama/Llama-3.1-8B", "h100-sxm", 1, 16,
                            max_num_seqs=256)  # the lesson engine's seats
    assert loaded.variants[0].spec.engine.num_blocks == blocks
    half = load_scenario_text(AUTO.format(extra=", gpu_memory_utilization: 0.5", tp=1),
                              "a.yaml", ".")
    assert half.variants[0].spec.engine.num_blocks < blocks
    assert half.variants[0].spec.engine.to_config().num_blocks < blocks


def test_num_blocks_auto_without_a_roofline_or_room_is_one_line():
    text = AUTO.format(extra="", tp=1).replace(
        "{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm, tp: 1}",
        "{kind: constant, step_time: 0.01}")
    with pytest.raises(KvschedError, match="num_blocks: auto needs time: {kind: roofline"):
        load_scenario_text(text, "a.yaml", ".")
    big = AUTO.format(extra="", tp=1).replace("Llama-3.1-8B", "Llama-3.1-70B")
    with pytest.raises(KvschedError, match="does not fit on 1 x h100-sxm"):
        load_scenario_text(big, "a.yaml", ".")


def test_validate_prints_the_derived_pool(tmp_path):
    path = tmp_path / "auto.yaml"
    path.write_text(AUTO.format(extra="", tp=2))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "base: engine.num_blocks: auto = " in result.output
    assert "for meta-llama/Llama-3.1-8B on 2 x h100-sxm" in result.output


def test_a_base_may_leave_the_roofline_to_its_variants():
    text = """\
name: v
engine: {num_blocks: auto}
workload: {kind: synthetic, num_requests: 5, arrival: {kind: all_at_once}, prompt_len: 100,
           output_len: 5}
variants:
  - {name: h100, time: {kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm}}
  - {name: a100, time: {kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: a100-40gb}}
"""
    h100, a100 = load_scenario_text(text, "v.yaml", ".").variants
    assert h100.spec.engine.num_blocks > 2 * a100.spec.engine.num_blocks  # 80 GB vs 40 GB


def test_every_registered_time_kind_builds_its_own_model(tmp_path):
    """`time_model_of` asks the spec (`build`), so each kind of the registry (`TimeSpec`) makes
    its own model: no list of kinds elsewhere to keep in step."""
    import typing

    from kvsched.schema import TimeSpec
    from kvsched.timing import ConstantStep, LinearStep, StepClock

    kinds = {typing.get_args(c.model_fields["kind"].annotation)[0]
             for c in typing.get_args(typing.get_args(TimeSpec)[0])}
    assert kinds == {"steps", "constant", "linear", "roofline", "profiled"}
    write_compact(tmp_path / "p")
    made = {kind: type(time_model_of(scenario(text, tmp_path).variants[0].spec))
            for kind, text in [
                ("steps", "{kind: steps}"), ("constant", "{kind: constant, step_time: 0.01}"),
                ("linear", "{kind: linear}"),
                ("roofline", "{kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm}"),
                ("profiled", f"{{kind: profiled, profiles: {tmp_path / 'p'}, "
                             "model: meta-llama/Llama-2-7b-hf}")]}
    assert made == {"steps": StepClock, "constant": ConstantStep, "linear": LinearStep,
                    "roofline": RooflineStep, "profiled": ProfiledStep}
