"""No knob is silently ignored by the compiled loop: every field of `EngineConfig`, set away
from its default, either keeps a run off the compiled loop (`fastcore.carries` says no, or
the loop gives up) or gives the Python loop's run byte for byte. The fields are read from
the dataclass, so a knob added later is checked without anyone remembering to list it."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing

import numpy as np
import pytest
from test_fastcore import assert_same, both

from kvsched import ConstantStep, EngineConfig, LinearStep, fastcore
from kvsched.request_columns import RequestColumns

pytestmark = pytest.mark.skipif(not fastcore.available(),
                                reason="the compiled loop is not built (no C compiler)")

BASE = {"max_num_batched_tokens": 48, "max_num_seqs": 6, "block_size": 4, "num_blocks": 400,
        "watermark": 0.0, "chunked_prefill": True}
"""A roomy lesson engine the compiled loop carries: whatever changes its run is the knob."""

POOLS = (400, 24, 8)
"""Roomy, and pools that fill to the last block (where the knobs about a full pool act)."""


def workloads() -> list[RequestColumns]:
    rng = np.random.default_rng(7)
    out = []
    for n, spread in ((12, 0.0), (40, 3.0), (80, 0.5)):
        arrival = np.round(np.sort(rng.uniform(0, spread, n)), 3) if spread else np.zeros(n)
        prompt = rng.integers(1, 90, n)
        output = rng.integers(1, 40, n)
        out.append(RequestColumns(arrival, prompt, output))
    # two prompts that fill an 8-block pool to its last block, with room left in each
    # request's last block for all its decodes
    out.append(RequestColumns(np.zeros(2), np.array([13, 13]), np.array([3, 3])))
    # a pool the batch outgrows: the compiled loop gives up on its preemption
    out.append(RequestColumns(np.zeros(8), np.full(8, 40), np.full(8, 30)))
    return out


def alternatives(field: dataclasses.Field) -> list[object]:
    """Values of the field other than its default, from its type."""
    default = field.default
    hint = typing.get_type_hints(EngineConfig)[field.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    kind = args[0] if isinstance(hint, types.UnionType) or typing.get_origin(hint) else hint
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return [member for member in kind if member != default]
    if kind is bool:
        return [not default]
    if kind is int:
        base = default if isinstance(default, int) else 64
        return sorted({v for v in (1, 2, 3, base + 1, max(1, base // 2), 2 * base + 5, 100)
                       if v != default})
    if kind is float:
        return [v for v in (0.05, 0.5, 2.0) if v != default]
    if kind is str:
        return [v for v in ("radix", "hashed") if v != default]
    raise AssertionError(f"EngineConfig.{field.name}: a type this test cannot vary: {hint}")


COMPANIONS = {
    "max_num_partial_prefills": {"long_prefill_token_threshold": 16},
    "max_long_partial_prefills": {"max_num_partial_prefills": 3,
                                  "long_prefill_token_threshold": 16},
    "enable_priority_scheduling": {"admission_rule": "future_tokens"},
    "priority_preemption": {"step_order": "prefill_first", "chunked_prefill": False},
    "kv_offload_blocks": {"enable_prefix_caching": True, "kv_offload_gbps": 8.0,
                          "kv_offload_block_bytes": 1000.0},
}
"""What a knob cannot run without (the config refuses it alone)."""

FIELDS = [f for f in dataclasses.fields(EngineConfig) if f.init]


@pytest.mark.parametrize("field", FIELDS, ids=[f.name for f in FIELDS])
def test_a_knob_away_from_its_default_is_carried_or_left_to_python(field):
    tried = 0
    for value in alternatives(field):
        try:
            config = EngineConfig(**{**BASE, **COMPANIONS.get(field.name, {}),
                                     field.name: value})
        except (ValueError, TypeError):
            continue  # a combination the config itself refuses
        tried += 1
        for clock in (ConstantStep(0.02), LinearStep(base=0.01, per_prefill_token=1e-4,
                                                     per_decode=1e-4, per_kv_token=1e-6)):
            for num_blocks in POOLS:
                sized = dataclasses.replace(config, num_blocks=num_blocks)
                for requests in workloads():
                    assert_same(*both(requests, sized, clock))
    assert tried, f"EngineConfig.{field.name}: no value away from its default was accepted"


def test_the_base_engine_is_the_compiled_loops():
    """The check above means something only if the base run is the compiled loop's."""
    from kvsched import make_policy
    config = EngineConfig(**BASE)
    for requests in workloads()[:3]:
        assert fastcore.carries(requests, config, make_policy("fcfs"), ConstantStep(0.02),
                                None, False)
