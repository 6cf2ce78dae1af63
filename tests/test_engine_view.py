"""What the world outside the engine reads of a replica: its `StepOutcome` (the step's row,
by name) and its `EngineView` (counts as the gate, the router and the loop see them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import make_requests

from kvsched import EngineConfig
from kvsched.engine import Engine
from kvsched.policies import Fcfs
from kvsched.records import STEP_COLUMNS, StepOutcome
from kvsched.sequence import Seq
from kvsched.timing import ConstantStep

ROOT = Path(__file__).resolve().parents[1]


def test_a_step_outcome_is_its_row_by_name():
    assert StepOutcome._fields == STEP_COLUMNS
    engine = Engine(EngineConfig(num_blocks=40, max_num_batched_tokens=64), Fcfs(),
                    ConstantStep(0.01))
    for k, request in enumerate(make_requests(3, prompt_len=30, output_len=4)):
        engine.arrive(Seq.of(request, k, 16), 0, 0.0)
    row = engine.step(0, 0.0)
    assert isinstance(row, StepOutcome) and isinstance(row, tuple)
    assert (row.prefill_tokens, row.num_admitted, row.num_waiting) == (60, 2, 1)
    assert row.end == row.time + row.duration == 0.01
    view = engine.view(3)
    assert (view.index, view.num_waiting, view.num_running, view.num_decoding) == (3, 1, 2, 2)
    assert view.num_free_blocks == 40 - 4 and view.queued_tokens == 30
    assert view.kv_tokens == 60 and engine.final_blocks_used == 4


def test_nothing_outside_the_engine_reads_its_parts():
    """The loop, the cluster, the admission gate and the routers use the Engine's own API."""
    offenders = []
    for path in sorted((ROOT / "kvsched").rglob("*.py")):
        if "engine" in path.relative_to(ROOT / "kvsched").parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\.sched\b", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_a_view_is_a_snapshot_nobody_changes():
    engine = Engine(EngineConfig(num_blocks=40, max_num_batched_tokens=64), Fcfs(),
                    ConstantStep(0.01))
    view = engine.view(2)
    for name in ("index", "num_waiting", "num_free_blocks"):
        with pytest.raises(AttributeError):
            setattr(view, name, 5)
    assert (view.index, view.num_waiting, view.num_free_blocks) == (2, 0, 40)
