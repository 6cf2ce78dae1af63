"""The engine's two declarations agree: every knob of `EngineConfig` (the dataclass the engine
reads) is a key of `EngineSpec` (the pydantic model a scenario is checked against) in the same
order with the same default, an enum knob's choices are its enum's values, and every other key
of `EngineSpec` is one `to_config` leaves out on purpose (docs/extending.md says why the two
are still written apart)."""

from __future__ import annotations

import dataclasses
import enum
import typing

from kvsched.config import EngineConfig
from kvsched.schema import EngineSpec, KvOffloadSpec

SPEC_ONLY = {"preset", "gpu_memory_utilization", "kv_cache_dtype", "enforce_eager", "usage",
             "kv_offload"}
"""Keys that configure something else than the engine's rules (the preset expands into the
other keys; the pool's size in GPU memory; the `vllm serve` defaults; the host tier, which
`to_config` spreads over `kv_offload_*`)."""

FROM_KV_OFFLOAD = {"kv_offload_blocks": "host_blocks", "kv_offload_gbps": "bandwidth_gbps",
                   "kv_offload_block_bytes": "block_bytes"}
"""The knobs `to_config` fills from `engine.kv_offload` (each with its key there)."""


def _knobs() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(EngineConfig) if f.init]


def test_every_knob_is_a_key_in_the_same_order():
    """A knob added to one declaration and not the other fails here."""
    keys = [key for key in EngineSpec.model_fields if key not in SPEC_ONLY]
    assert keys == [f.name for f in _knobs() if f.name not in FROM_KV_OFFLOAD]
    assert set(FROM_KV_OFFLOAD.values()) <= set(KvOffloadSpec.model_fields)


def test_each_key_defaults_to_its_knobs_default():
    """`engine: {}` is the lesson's engine, key by key (an enum knob is written as its value)."""
    for knob in _knobs():
        if knob.name in FROM_KV_OFFLOAD:
            continue
        default = knob.default
        expected = default.value if isinstance(default, enum.Enum) else default
        assert EngineSpec.model_fields[knob.name].default == expected, knob.name


def test_an_enum_knobs_choices_are_its_enums_values():
    """The schema's `Literal` choices are read from the enum (`one_of`), never copied."""
    hints = typing.get_type_hints(EngineConfig)
    for knob in _knobs():
        kind = hints[knob.name]
        if isinstance(kind, type) and issubclass(kind, enum.Enum):
            choices = typing.get_args(EngineSpec.model_fields[knob.name].annotation)
            assert choices == tuple(member.value for member in kind), knob.name
