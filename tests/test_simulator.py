"""The loop leaves the garbage collector as it found it (it freezes the heap while it runs)."""

from __future__ import annotations

import gc

from kvsched import ConstantStep, EngineConfig, Request, simulate

REQUESTS = [Request(f"r{i}", i * 0.05, 30 + i, 20 + i) for i in range(12)]


def test_a_run_thaws_what_it_froze():
    """Nothing stays frozen after a run, and the records are those of a run with the
    collector off."""
    assert gc.get_freeze_count() == 0
    frozen = simulate(REQUESTS, EngineConfig(num_blocks=64), None, ConstantStep(0.01))
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.disable()
    try:
        plain = simulate(REQUESTS, EngineConfig(num_blocks=64), None, ConstantStep(0.01))
    finally:
        gc.enable()
    assert frozen.steps == plain.steps and frozen.summary == plain.summary


def test_a_caller_s_own_freeze_is_left_alone():
    """Objects the caller froze before the run are still frozen after it (a thaw would
    empty the permanent generation)."""
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        simulate(REQUESTS, EngineConfig(num_blocks=64), None, ConstantStep(0.01))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
