"""MFU and memory-bandwidth utilisation per step (steps.csv `mfu`, `mbu`) and their summary
means, with a hardware time model; empty without one."""

from __future__ import annotations

import csv

import pytest

from kvsched import EngineConfig, LinearStep, Request, simulate
from kvsched.records import STEP_COLUMNS
from kvsched.records.csvout import StepCsv
from kvsched.records.steplog import COMPACT_COLUMNS, RecordMode, compact_row
from kvsched.scheduler import Stretch
from kvsched.timing.roofline import BatchShape, RooflineStep

CONFIG = EngineConfig(max_num_batched_tokens=512, block_size=16, num_blocks=400,
                      chunked_prefill=True)
REQUESTS = [Request(f"r{i}", 0.02 * i, 200 + 150 * i, 30 + 11 * i) for i in range(6)]
MFU, MBU = STEP_COLUMNS.index("mfu"), STEP_COLUMNS.index("mbu")


@pytest.fixture(scope="module")
def h100() -> RooflineStep:
    return RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm")


def test_a_step_by_hand(h100):
    """Step 0 prefills 200 tokens: MFU = its FLOPs / (duration x peak), MBU likewise."""
    row = simulate(REQUESTS, CONFIG, time_model=h100).steps[0]
    shape = BatchShape(((200, 0),))
    duration = h100.duration_shape(shape)
    assert row[2] == duration
    assert row[MFU] == pytest.approx(h100.flops(shape)
                                     / (duration * h100.gpu.peak_flops))  # type: ignore
    assert row[MBU] == pytest.approx(h100.memory_bytes(shape)
                                     / (duration * h100.gpu.memory_bw))  # type: ignore
    # a small prefill on an H100 is weight-bound: the memory figure is the higher one
    assert 0 < row[MFU] < row[MBU] < 1


def test_stretches_get_the_exact_path_figures(h100):
    """Steps inside decode stretches get the same floats as when run one by one."""
    fast = simulate(REQUESTS, CONFIG, time_model=h100)
    exact = simulate(REQUESTS, CONFIG, time_model=h100, stretches=False)
    assert any(isinstance(s, Stretch) for s in fast.step_log.kept)
    assert [row[MFU:] for row in fast.steps] == [row[MFU:] for row in exact.steps]
    assert fast.summary["mfu_mean"] == exact.summary["mfu_mean"]
    mfus = [row[MFU] for row in exact.steps]
    assert fast.summary["mfu_mean"] == pytest.approx(sum(mfus) / len(mfus))
    assert 0 < fast.summary["mbu_mean"] < 1


def test_without_a_hardware_model_the_figures_are_empty(tmp_path):
    """Linear steps: None in the rows and the summary, empty cells in steps.csv."""
    result = simulate(REQUESTS, CONFIG, time_model=LinearStep())
    assert {row[MFU] for row in result.steps} == {None}
    assert result.summary["mfu_mean"] is None and result.summary["mbu_mean"] is None
    path = tmp_path / "steps.csv"
    writer = StepCsv(path, RecordMode.FULL, CONFIG.num_blocks)
    writer(result.step_log.kept)
    writer.close()
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == len(result.steps)
    assert {r["mfu"] for r in rows} == {""} and {r["mbu"] for r in rows} == {""}


def test_csv_columns_hold_every_step_and_compact_rows_weight_by_duration(h100, tmp_path):
    """Full steps.csv: one figure per step, stretches expanded; compact: duration-weighted."""
    result = simulate(REQUESTS, CONFIG, time_model=h100)
    path = tmp_path / "steps.csv"
    writer = StepCsv(path, RecordMode.FULL, CONFIG.num_blocks)
    writer(result.step_log.kept)
    writer.close()
    written = [float(r["mfu"]) for r in csv.DictReader(path.open())]
    assert written == pytest.approx([row[MFU] for row in result.steps], rel=1e-9)
    stretch = next(s for s in result.step_log.kept if isinstance(s, Stretch) and s.num_steps > 2)
    row = dict(zip(COMPACT_COLUMNS, compact_row(stretch, CONFIG.num_blocks), strict=True))
    assert stretch.mfu is not None
    weighted = sum(m * d for m, d in zip(stretch.mfu, stretch.durations, strict=True))
    assert row["mfu"] == pytest.approx(weighted / sum(stretch.durations))
    assert min(stretch.mfu) <= row["mfu"] <= max(stretch.mfu)
