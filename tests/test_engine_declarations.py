"""One declaration per engine knob: `EngineConfig`'s `knob(...)` fields. The scenario's
`engine:` model (`EngineSpec`) is made from them, and these tests hold what it made to them:
the keys and their order, defaults, bounds (refused alike by the engine and the schema),
choices and meanings; and `kvsched keys`, which prints them."""

from __future__ import annotations

import enum
import math
import typing

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.config import KNOB_TYPES, KNOBS, EngineConfig
from kvsched.schema import POOL_KEYS, EngineSpec

SCENARIO_KNOBS = [k for k in KNOBS if k.metadata["scenario"]]


def test_the_keys_are_the_knobs_in_order_with_the_other_keys_in_their_places():
    keys = list(EngineSpec.model_fields)
    assert keys[0] == "preset" and keys[-1] == "kv_offload"
    at = keys.index("num_blocks")
    assert tuple(keys[at + 1:at + 1 + len(POOL_KEYS)]) == POOL_KEYS
    others = {"preset", "kv_offload", *POOL_KEYS}
    assert [k for k in keys if k not in others] == [k.name for k in SCENARIO_KNOBS]
    assert not {k.name for k in KNOBS if not k.metadata["scenario"]} & set(keys)


def test_each_key_defaults_to_its_knobs_default_and_means_what_it_declares():
    """`engine: {}` is the lesson's engine, key by key (an enum knob is written as its value),
    and every key says what it means."""
    for knob in SCENARIO_KNOBS:
        default = knob.default.value if isinstance(knob.default, enum.Enum) else knob.default
        field = EngineSpec.model_fields[knob.name]
        assert field.default == default, knob.name
        assert field.description == knob.metadata["doc"], knob.name
    assert all(len(f.description or "") > 10 for f in EngineSpec.model_fields.values())
    assert EngineSpec().to_config() == EngineConfig()


def test_an_enum_knobs_choices_are_its_enums_values():
    for knob in SCENARIO_KNOBS:
        kind = KNOB_TYPES[knob.name]
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            choices = typing.get_args(EngineSpec.model_fields[knob.name].annotation)
            assert choices == tuple(member.value for member in kind), knob.name


def _outside(values, kind) -> list:
    """Values just past each bound of a `Range`."""
    step = 1 if kind is int else 1e-9
    out = []
    if values.ge is not None:
        out.append(values.ge - step)
    if values.gt is not None:
        out.append(values.gt)
    if values.le is not None:
        out.append(values.le + step if kind is int else values.le * (1 + 1e-9))
    if values.lt is not None:
        out.append(values.lt)
    return out


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.metadata["range"] is not None],
                         ids=lambda k: k.name)
def test_a_bound_is_refused_alike_by_the_engine_and_the_scenario(knob):
    """A value past a knob's bound: the engine's check names the knob and the bound, and
    (for a scenario key) pydantic's error sits on that key; a value on an inclusive bound
    passes both checks of that bound."""
    kind = int if KNOB_TYPES[knob.name] in (int, int | None) else float
    values = knob.metadata["range"]
    bad = _outside(values, kind)
    assert bad, knob.name
    for value in [*bad, *([math.nan] if kind is float else [])]:
        with pytest.raises(ValueError, match=f"^{knob.name} must be "):
            EngineConfig(**{knob.name: value})
        if knob.metadata["scenario"]:
            with pytest.raises(ValidationError) as caught:
                EngineSpec.model_validate({knob.name: value})
            assert {err["loc"][0] for err in caught.value.errors()} == {knob.name}
    for bound in (values.ge, values.le):
        if bound is None:
            continue
        value = kind(bound)
        try:
            EngineConfig(**{knob.name: value})
        except ValueError as exc:  # another rule (a combination) may refuse it, not the bound
            assert not str(exc).startswith(f"{knob.name} must be"), (knob.name, value)
        if knob.metadata["scenario"]:
            try:
                EngineSpec.model_validate({knob.name: value})
            except ValidationError as exc:
                assert knob.name not in {err["loc"][0] for err in exc.errors()}, exc


def test_none_passes_only_where_a_knob_takes_none():
    with pytest.raises(ValueError, match="^num_blocks must be a number, got None"):
        EngineConfig(num_blocks=None)
    with pytest.raises(ValueError, match="^delay_factor must be a number"):
        EngineConfig(delay_factor=None)
    assert EngineConfig(max_model_len=None).max_model_len is None


def test_kvsched_keys_prints_every_key_or_those_asked_for():
    result = CliRunner().invoke(app, ["keys"])
    assert result.exit_code == 0, result.output
    for key in EngineSpec.model_fields:
        assert f"\n{key}: " in "\n" + result.output, key
    one = CliRunner().invoke(app, ["keys", "watermark", "preemption_mode"])
    assert one.exit_code == 0, one.output
    assert one.output.splitlines()[0] == "watermark: 0.01 (0 in vllm_v1, sglang)"
    assert "values: a number >= 0 and < 1" in one.output
    assert "\npreemption: recompute" in one.output and "values: recompute, swap" in one.output
    assert "max_num_seqs" not in one.output


def test_kvsched_keys_refuses_an_unknown_key_in_one_line():
    result = CliRunner().invoke(app, ["keys", "num_blockz"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "num_blockz" in result.output
    assert "Traceback" not in result.output
