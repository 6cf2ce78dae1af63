"""Time models that take a BatchShape see each step's real batch: every prefill chunk with the
context already cached, the decodes and their KV reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kvsched import EngineConfig, LinearStep, Request, simulate
from kvsched.timing.roofline import BatchShape, RooflineStep


@dataclass
class Spy:
    """A time model that records the shapes it was asked to price (and never the integers)."""

    shapes: list[BatchShape] = field(default_factory=list)
    unit: str = "s"
    whole_steps: bool = False

    def duration_shape(self, shape: BatchShape) -> float:
        self.shapes.append(shape)
        return 0.01 + 1e-5 * shape.num_tokens

    def duration(self, prefill_tokens, num_decodes, kv_read_tokens, swapped_blocks):
        raise AssertionError("a model with duration_shape gets shapes")


def test_chunks_carry_their_cached_context():
    """A 100-token prompt at budget 32 runs as chunks after 0, 32, 64 and 96 cached tokens."""
    spy = Spy()
    config = EngineConfig(max_num_batched_tokens=32, block_size=16, num_blocks=50,
                          chunked_prefill=True)
    simulate([Request("a", 0, 100, 3)], config, time_model=spy, stretches=False)
    assert [s.prefill_chunks for s in spy.shapes[:4]] == [((32, 0),), ((32, 32),),
                                                           ((32, 64),), ((4, 96),)]
    # then two decodes of the 100-token context plus the tokens generated so far
    assert [(s.num_decodes, s.decode_kv_tokens) for s in spy.shapes[4:]] == [(1, 101), (1, 102)]


def test_two_prefills_in_one_step_are_two_chunks():
    """Each request admitted in a step is its own chunk, in admission order."""
    spy = Spy()
    config = EngineConfig(max_num_batched_tokens=64, block_size=16, num_blocks=50)
    simulate([Request("a", 0, 10, 2), Request("b", 0, 20, 2)], config, time_model=spy)
    assert spy.shapes[0].prefill_chunks == ((10, 0), (20, 0))


def test_roofline_steps_are_priced_from_the_shape():
    """steps.csv durations are the roofline's duration_shape of each step's batch."""
    h100 = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm")
    config = EngineConfig(max_num_batched_tokens=512, block_size=16, num_blocks=400,
                          chunked_prefill=True)
    requests = [Request("a", 0, 1500, 4), Request("b", 0, 300, 4)]
    durations = [row[2] for row in simulate(requests, config, time_model=h100).steps]
    # step 0: a's first chunk only; step 1: a's second, after 512 cached tokens
    assert durations[0] == h100.duration_shape(BatchShape(((512, 0),)))
    assert durations[1] == h100.duration_shape(BatchShape(((512, 512),)))
    assert durations[1] > durations[0]  # the cached context costs attention


def test_roofline_stretches_equal_the_exact_path():
    """With shapes on exact steps and stretch_durations in stretches, the records agree."""
    h100 = RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm")
    config = EngineConfig(max_num_batched_tokens=256, block_size=16, num_blocks=300,
                          chunked_prefill=True)
    requests = [Request(f"r{i}", 0.05 * i, 100 + 90 * i, 40 + 13 * i) for i in range(8)]
    fast = simulate(requests, config, time_model=h100)
    exact = simulate(requests, config, time_model=h100, stretches=False)
    assert fast.steps == exact.steps
    assert fast.requests == exact.requests


def test_integer_models_keep_the_four_integers():
    """A model without duration_shape still gets duration(prefill, decodes, kv, swapped)."""
    clock = LinearStep(base=0.01, per_prefill_token=0.001)
    result = simulate([Request("a", 0, 10, 2), Request("b", 0, 20, 2)],
                      EngineConfig(max_num_batched_tokens=64, num_blocks=50), time_model=clock)
    assert result.steps[0][2] == pytest.approx(0.01 + 0.001 * 30)
