"""Overload at peaks: bursts the engine falls behind, with no sustained overload and no SLO,
are named instead of 'no incident' (through `kvsched run --json` and its printed diagnosis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

SCENARIO = """\
name: peaks
engine: {max_num_batched_tokens: 512, max_num_seqs: 256, num_blocks: 8000, block_size: 16}
time: {kind: constant, step_time: 0.05}
workload: {kind: trace, path: bursts.csv, format: kvsched}
variants:
  - {name: narrow}
  - {name: wide, engine: {max_num_batched_tokens: 65536, max_num_seqs: 1024}}
  - {name: strict, diagnosis: {overload_wait: 5}}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict[str, dict], str]:
    """200 requests at once every 100 s: budget 512 serves a burst in about 5 s."""
    folder: Path = tmp_path_factory.mktemp("peaks")
    rows = "".join(f"{100 * burst}.0,256,4\n" for burst in range(4) for _ in range(200))
    (folder / "bursts.csv").write_text("arrival_time,prompt_len,output_len\n" + rows)
    (folder / "peaks.yaml").write_text(SCENARIO)
    runner = CliRunner()
    summaries = runner.invoke(app, ["run", str(folder / "peaks.yaml"), "--json",
                                    "--out", str(folder / "a")])
    assert summaries.exit_code == 0, summaries.output
    table = runner.invoke(app, ["run", str(folder / "peaks.yaml"), "--out", str(folder / "b")])
    return {s["variant"]: s for s in json.loads(summaries.stdout)}, table.stdout


def test_bursts_the_engine_falls_behind_are_overload_at_peaks(runs):
    summaries, _ = runs
    narrow = summaries["narrow"]
    assert [i["kind"] for i in narrow["incidents"]] == ["overload"]
    assert narrow["incident_overload"] == 1
    evidence = narrow["incidents"][0]["evidence"]
    assert evidence["queue_time_p99"] > evidence["e2e_p50"]
    assert evidence["peak_waiting"] >= 10 and 0 < evidence["busy_share"] <= 1.0001
    # the peak is one of the bursts (bins of 300/64 s), inside the arrival span
    assert any(100 * k - 5 <= evidence["peak_start"] < evidence["peak_end"] <= 100 * k + 20
               for k in range(3))


def test_the_printed_diagnosis_names_it(runs):
    _, table = runs
    assert "diagnosis: no incident" not in table
    assert "narrow: overload at peaks: TTFT p99 " in table
    assert "longer than the median request took from arrival to finish" in table


def test_an_engine_that_keeps_up_and_a_looser_threshold_are_quiet(runs):
    """Budget 65,536 serves a burst in one prefill step; overload_wait: 5 asks the tail to
    wait five median requests' time."""
    summaries, _ = runs
    assert summaries["wide"]["num_incidents"] == 0
    assert summaries["strict"]["num_incidents"] == 0


def test_all_at_once_is_a_queue_not_overload(tmp_path):
    """One burst and nothing after: the workload makes the queue, no rate outruns the engine."""
    rows = "".join("0.0,256,4\n" for _ in range(200))
    (tmp_path / "bursts.csv").write_text("arrival_time,prompt_len,output_len\n" + rows)
    (tmp_path / "peaks.yaml").write_text(SCENARIO.split("variants:")[0])
    result = CliRunner().invoke(app, ["run", str(tmp_path / "peaks.yaml"), "--json",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["num_incidents"] == 0
