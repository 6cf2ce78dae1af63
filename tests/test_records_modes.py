"""Step and event records: streamed in chunks, written full or compact, byte-identical CSVs."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from test_stretches import long_workloads
from typer.testing import CliRunner

from kvsched import STEP_COLUMNS, ConstantStep, EngineConfig, Request, StepLog, simulate
from kvsched.cli import app
from kvsched.records.csvout import StepCsv, write_rows
from kvsched.records.floatfmt import cell_text
from kvsched.records.steplog import COMPACT_COLUMNS, RecordMode
from kvsched.simulator import DIAGNOSIS_EVENTS

ENGINE = EngineConfig(num_blocks=64, max_num_batched_tokens=256)


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_workloads())
def test_streamed_events_are_the_events_in_order(requests):
    """Chunks handed to the sink add up to the run's events; the kept ones are the
    diagnosis's."""
    whole = simulate(requests, ENGINE, time_model=ConstantStep(0.01))
    chunks: list[list[tuple]] = []
    streamed = simulate(requests, ENGINE, time_model=ConstantStep(0.01),
                        event_sink=chunks.append)
    assert [e for chunk in chunks for e in chunk] == whole.events
    assert streamed.events == [e for e in whole.events if e[3] in DIAGNOSIS_EVENTS]
    assert streamed.summary == whole.summary


@pytest.mark.parametrize("engine", [
    ENGINE, replace(ENGINE, null_block=True, num_blocks=65),
    replace(ENGINE, num_blocks=40, enable_prefix_caching=True),
    replace(ENGINE, num_blocks=40, enable_prefix_caching=True, prefix_cache="radix")])
def test_step_csv_full_equals_the_rows_written_one_by_one(tmp_path, engine):
    """The pyarrow writer, fed stretches, writes the bytes the csv module writes for rows
    (with vLLM V1's null block too: the pool, and so the log, has one block fewer; and with
    a prefix cache evicting blocks inside stretches)."""
    from kvsched.prefix import Prefix

    requests = [Request(f"r{i}", i * 3.5, 20 + 7 * i, 60 + 11 * i,
                        prefix=Prefix(((i % 3, 20),))) for i in range(12)]
    log = StepLog(engine.usable_blocks)
    result = simulate(requests, engine, time_model=ConstantStep(0.0039), step_log=log)
    writer = StepCsv(tmp_path / "fast.csv", RecordMode.FULL, engine.usable_blocks)
    writer(log.kept[:7])
    writer(log.kept[7:])
    writer.close()
    write_rows(tmp_path / "slow.csv", STEP_COLUMNS, result.steps)
    assert (tmp_path / "fast.csv").read_bytes() == (tmp_path / "slow.csv").read_bytes()
    if engine.enable_prefix_caching:  # the cache columns were exercised
        assert any(row[21] for row in result.steps) and any(row[22] for row in result.steps)


def test_compact_rows_add_up_to_the_full_record(tmp_path):
    requests = [Request(f"r{i}", i * 2.0, 30, 200) for i in range(6)]
    log = StepLog(ENGINE.num_blocks)
    result = simulate(requests, ENGINE, time_model=ConstantStep(0.01), step_log=log)
    writer = StepCsv(tmp_path / "compact.csv", RecordMode.COMPACT, ENGINE.num_blocks)
    writer(log.kept)
    writer.close()
    rows = read(tmp_path / "compact.csv")
    assert tuple(rows[0]) == COMPACT_COLUMNS
    assert len(rows) < result.summary["num_steps"] / 5
    assert sum(int(r["num_steps"]) for r in rows) == result.summary["num_steps"]
    assert sum(int(r["decode_tokens"]) for r in rows) == result.summary["decode_tokens"]
    assert sum(int(r["num_finished"]) for r in rows) == result.summary["num_finished"]
    assert max(int(r["blocks_used"]) for r in rows) == result.summary["peak_blocks_used"]
    starts = [int(r["step"]) for r in rows]
    ends = [int(r["step"]) + int(r["num_steps"]) for r in rows]
    assert starts[1:] == ends[:-1]  # every step in exactly one row


@pytest.mark.parametrize("hardware", [False, True])
def test_compact_chunks_in_c_are_arrows_bytes(tmp_path, monkeypatch, hardware):
    """Compact `steps.csv` chunks (rows alone, stretches alone, both), formatted in C or
    written by Arrow when the formatter is off: the same bytes, mfu and mbu empty or not."""
    from kvsched.records import fastcsv
    from kvsched.timing.roofline import RooflineStep

    clock = (RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm") if hardware
             else ConstantStep(0.01))
    requests = [Request(f"r{i}", i * 0.7, 30 + 9 * i, 120 + 13 * i) for i in range(10)]
    log = StepLog(ENGINE.num_blocks)
    simulate(requests, ENGINE, time_model=clock, step_log=log)
    kept = log.kept
    rows = [segment for segment in kept if isinstance(segment, tuple)]
    stretches = [segment for segment in kept if not isinstance(segment, tuple)]
    assert len(rows) > 3 and len(stretches) > 3
    files = []
    for formatter in (True, False):
        monkeypatch.setattr(fastcsv, "available", lambda on=formatter: on)
        path = tmp_path / f"{formatter}.csv"
        writer = StepCsv(path, RecordMode.COMPACT, ENGINE.num_blocks)
        for chunk in (rows, stretches, kept):
            writer(chunk)
        writer.close()
        files.append(path.read_bytes())
    assert files[0] == files[1] and files[0].count(b"\n") > 10
    assert (b",," in files[0]) is not hardware  # mfu, mbu empty without a hardware model


@pytest.mark.parametrize("engine", [ENGINE, replace(ENGINE, num_blocks=40,
                                                     enable_prefix_caching=True)])
@pytest.mark.parametrize("hardware", [False, True])
def test_compact_rows_made_as_logged_are_the_segments_bytes(tmp_path, engine, hardware):
    """A compact `steps.csv` streamed from a log that makes its rows as each step or
    stretch comes (in chunks of 5) holds the bytes of the kept segments written at the end,
    and each row sums (or ends) the full rows of its steps."""
    from kvsched.prefix import Prefix
    from kvsched.timing.roofline import RooflineStep

    clock = (RooflineStep("meta-llama/Llama-3.1-8B", "h100-sxm") if hardware
             else ConstantStep(0.01))
    requests = [Request(f"r{i}", i * 0.7, 30 + 9 * i, 120 + 13 * i,
                        prefix=Prefix(((i % 3, 20),))) for i in range(10)]
    kept = StepLog(engine.usable_blocks)
    simulate(requests, engine, time_model=clock, step_log=kept)
    writer = StepCsv(tmp_path / "kept.csv", RecordMode.COMPACT, engine.usable_blocks)
    writer(kept.kept)
    writer.close()
    streamed = StepCsv(tmp_path / "streamed.csv", RecordMode.COMPACT, engine.usable_blocks)
    log = StepLog(engine.usable_blocks, keep=False, sink=streamed, chunk=5)
    simulate(requests, engine, time_model=clock, step_log=log)
    streamed.close()
    assert log._compact is not None  # (the rows were made as logged)
    made = (tmp_path / "streamed.csv").read_bytes()
    assert made == (tmp_path / "kept.csv").read_bytes() and made.count(b"\n") > 10
    full = kept.rows()  # each compact row against the full rows of its steps
    rows = read(tmp_path / "kept.csv")
    for row in rows:
        first, steps = int(row["step"]), int(row["num_steps"])
        own = full[first:first + steps]
        assert [r[0] for r in own] == list(range(first, first + steps))
        assert row["time"] == cell_text(own[0][1])
        duration = 0.0
        for r in own:
            duration += r[2]
        assert row["duration"] == cell_text(duration)
        for name in ("decode_tokens", "budget_used", "num_finished", "evicted_blocks",
                     "prefill_tokens", "num_admitted"):
            index = STEP_COLUMNS.index(name)
            assert int(row[name]) == sum(r[index] for r in own), name
        for name in ("blocks_used", "blocks_free", "cached_blocks", "num_running",
                     "num_waiting"):
            assert int(row[name]) == own[-1][STEP_COLUMNS.index(name)], name
        assert (row["mfu"] == "") is not hardware
    if engine.enable_prefix_caching:  # the cache columns were exercised
        assert any(int(r["cached_blocks"]) for r in rows)
        assert any(int(r["evicted_blocks"]) for r in rows)


SCENARIO = """
name: modes
engine: {num_blocks: 64, max_num_batched_tokens: 256}
time: {kind: constant, step_time: 0.01}
workload:
  kind: inline
  requests:
    - {arrival: 0, prompt_len: 30, output_len: 200}
    - {arrival: 0.5, prompt_len: 50, output_len: 150}
    - {arrival: 3, prompt_len: 10, output_len: 100}
"""


def test_cli_records_modes(tmp_path):
    """--records full (the default), compact and summary, through the CLI."""
    path = tmp_path / "modes.yaml"
    path.write_text(SCENARIO)
    runner = CliRunner()
    outputs = {}
    for mode in ("default", "full", "compact", "summary"):
        args = ["run", str(path), "--out", str(tmp_path / mode)]
        if mode != "default":
            args += ["--records", mode]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        outputs[mode] = tmp_path / mode / "modes" / "base"
    full = (outputs["full"] / "steps.csv").read_bytes()
    assert full == (outputs["default"] / "steps.csv").read_bytes()
    assert tuple(read(outputs["compact"] / "steps.csv")[0]) == COMPACT_COLUMNS
    assert not (outputs["summary"] / "steps.csv").exists()
    for mode in ("compact", "summary"):
        for name in ("requests.csv", "events.csv", "summary.json"):
            assert (outputs[mode] / name).read_bytes() == (outputs["full"] / name).read_bytes()
    bad = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "x"),
                              "--records", "everything"])
    assert bad.exit_code == 2
    assert not (tmp_path / "x").exists()


def test_progress_is_reported_with_arrivals_and_time():
    """A long run calls `progress` with non-decreasing arrivals and times."""
    requests = [Request(f"r{i}", i * 0.05, 5, 3) for i in range(3000)]
    calls: list[tuple[int, float]] = []
    simulate(requests, EngineConfig(num_blocks=400), time_model=ConstantStep(0.01),
             progress=lambda arrived, now: calls.append((arrived, now)))
    assert len(calls) >= 2
    assert calls == sorted(calls) and calls[-1][0] <= 3000 and calls[-1][1] > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_workloads())
def test_the_timeline_buckets_every_step_of_the_arrival_span(requests):
    """Busy time and queue sums per bucket equal those of the steps that start in it."""
    result = simulate(requests, ENGINE, time_model=ConstantStep(0.01))
    timeline = result.step_log.stats.timeline
    if timeline is None or not timeline.width:
        return
    busy = [0.0] * len(timeline.busy)
    waiting = [0] * len(timeline.busy)
    for row in result.steps:
        if timeline.start <= row[1] < timeline.end:
            k = min(len(busy) - 1, int((row[1] - timeline.start) / timeline.width))
            busy[k] += row[2]
            waiting[k] += row[4]
    assert waiting == list(timeline.waiting)
    assert all(abs(a - b) < 1e-9 for a, b in zip(busy, timeline.busy, strict=True))
