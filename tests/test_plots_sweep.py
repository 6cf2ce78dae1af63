"""sweep.png cannot make a starving configuration look best: it leads with what each run
completed, names each run's incidents, and draws a latency figure over part of the requests
hollow (and ringed when the run has an incident); a variant's SLO is a line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plots import assert_sensible_png, invoke

from kvsched.plots.sweep import (
    COUNT_COLUMNS,
    SweepAxis,
    draw_sweep,
    read_sweep,
    sweep_lines,
    variant_slos,
)

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.fixture(scope="module")
def budget_sweep(tmp_path_factory) -> tuple[Path, str]:
    """The issue's command: `kvsched sweep scenarios/budget128.yaml --budget 64..2048 --plot`
    (budget 128 starves 290 of 300 requests and serves the other ten at once)."""
    out = tmp_path_factory.mktemp("budget")
    result = invoke("sweep", SCENARIOS / "budget128.yaml", "--budget", "64..2048", "--plot",
                    "--out", out)
    assert result.exit_code == 0, result.output
    return out / "sweep-budget128", result.stdout


def panels(figure):
    """The figure's panels by title (requests, incidents, TTFT p50, TTFT p99, ...)."""
    return {ax.get_title().split(" (")[0].split(",")[0]: ax for ax in figure.axes}


def point_sets(ax, gid: str) -> set[tuple[float, float]]:
    return {(float(x), float(y)) for line in ax.get_lines() if line.get_gid() == gid
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)}


def test_the_command_writes_and_names_sweep_png(budget_sweep):
    folder, stdout = budget_sweep
    assert_sensible_png(folder / "sweep.png")
    assert stdout.strip().splitlines()[-1] == f"wrote {folder / 'sweep.png'}"


def test_budget_128_does_not_read_as_the_winner(budget_sweep):
    """At budget 128 the FCFS variant has the lowest TTFT p99 of the grid's point, over the
    10 of its 300 requests that completed: its point is hollow and ringed, its requests
    panel shows 10/300 completed and 290/300 starved, its incidents are named."""
    folder, _ = budget_sweep
    info, axes, frame = read_sweep(folder)
    row = frame[(frame["engine.max_num_batched_tokens"] == 128)
                & (frame["variant"] == "budget128")].iloc[0]
    assert (row["num_finished"], row["num_starved"]) == (10, 290)
    at_128 = frame[frame["engine.max_num_batched_tokens"] == 128]
    assert row["ttft_p99"] == at_128["ttft_p99"].min()  # the figure alone would crown it
    figure = draw_sweep(axes, frame, "t", variant_slos(info, axes))
    by_title = panels(figure)
    requests = by_title["requests of each run: completed"]
    shares = {(float(x), round(float(y), 6)) for line in requests.get_lines()
              for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)}
    assert (128.0, round(10 / 300, 6)) in shares and (128.0, round(290 / 300, 6)) in shares
    for title in ("TTFT p50", "TTFT p99", "throughput"):
        ax = by_title[title]
        value = float(row["ttft_p99"] if title == "TTFT p99" else row[
            "ttft_p50" if title == "TTFT p50" else "throughput"])
        assert (128.0, value) in point_sets(ax, "incomplete"), title
        assert (128.0, value) in point_sets(ax, "incident"), title
    chunked = at_128[at_128["variant"] == "budget128_chunked"].iloc[0]
    assert chunked["num_starved"] == 0
    assert (128.0, float(chunked["ttft_p99"])) not in point_sets(by_title["TTFT p99"],
                                                                  "incomplete")
    incidents = by_title["incidents"]
    names = [label.get_text() for label in incidents.get_yticklabels()]
    assert {"starvation", "head_of_line"} <= set(names)
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert any(text.startswith("hollow, dotted: some requests starved") for text in legend)


def test_every_filled_point_completed_all_its_requests(budget_sweep):
    """No latency point of a run that starved or left a request unfinished is drawn
    filled: the filled markers are exactly the complete runs."""
    folder, _ = budget_sweep
    info, axes, frame = read_sweep(folder)
    figure = draw_sweep(axes, frame, "t")
    ax = panels(figure)["TTFT p99"]
    hollow = point_sets(ax, "incomplete")
    complete = frame[(frame["num_starved"] == 0) & (frame["num_unfinished"] == 0)]
    partial = frame.drop(complete.index)
    assert {(float(b), float(v)) for b, v in zip(partial["engine.max_num_batched_tokens"],
                                                 partial["ttft_p99"], strict=True)} == hollow
    assert not hollow & {(float(b), float(v)) for b, v in zip(
        complete["engine.max_num_batched_tokens"], complete["ttft_p99"], strict=True)}


def test_the_slo_a_variant_sets_is_a_line(tmp_path):
    text = (SCENARIOS / "budget128.yaml").read_text() + "slo: {ttft: 5}\n"
    (tmp_path / "b.yaml").write_text(text)
    result = invoke("sweep", tmp_path / "b.yaml", "--budget", "128,2048", "--variant",
                    "budget128", "--variant", "budget128_chunked", "--out", tmp_path / "o",
                    "--plot")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "o" / "sweep-budget128"
    info, axes, frame = read_sweep(folder)
    assert info["variant_slo"]["budget128"] == {"ttft": 5.0}
    figure = draw_sweep(axes, frame, "t", variant_slos(info, axes))
    for title in ("TTFT p50", "TTFT p99"):
        lines = [line for line in panels(figure)[title].get_lines() if line.get_gid() == "slo"]
        assert [float(line.get_ydata()[0]) for line in lines] == [5.0]
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert "SLO: TTFT 5 steps" in legend
    swept = [SweepAxis("slo.ttft", "--set", (1, 2), False)]
    assert variant_slos(info, swept) == {}  # a swept target is no one line


def test_an_older_sweep_folder_still_draws(budget_sweep, tmp_path):
    """A summary.csv without the request counts or incidents and a sweep.json without
    `variant_slo` (sweeps written before): drawn, the requests panel says why it is empty."""
    folder, _ = budget_sweep
    old = tmp_path / "sweep-old"
    shutil.copytree(folder, old)
    frame = pd.read_csv(old / "summary.csv")
    frame.drop(columns=[*COUNT_COLUMNS, "incidents"]).to_csv(old / "summary.csv", index=False)
    info = json.loads((old / "sweep.json").read_text())
    del info["variant_slo"]
    (old / "sweep.json").write_text(json.dumps(info))
    (old / "sweep.png").unlink()
    result = invoke("plot", old)
    assert result.exit_code == 0, result.output
    assert_sensible_png(old / "sweep.png")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 50), st.integers(0, 50),
                          st.sampled_from(["", "starvation", "overload; tail_blowup"])),
                min_size=1, max_size=6))
def test_sweep_lines_call_a_run_complete_only_when_every_request_finished(rows):
    """`complete` is num_finished == num_requests, whatever the latency figures say."""
    records = []
    for x, (finished, starved, unfinished, incidents) in enumerate(rows):
        records.append({"b": x, "variant": "v", "time_unit": "steps", "ttft_p50": 1.0,
                        "ttft_p99": 1.0 if starved else 9.0, "throughput": 1.0,
                        "num_preemptions": 0, "num_requests": finished + starved + unfinished,
                        "num_finished": finished, "num_starved": starved,
                        "num_unfinished": unfinished, "num_rejected": 0,
                        "incidents": incidents or np.nan})
    frame = pd.DataFrame.from_records(records)
    line = sweep_lines(frame, [SweepAxis("b", "--set", tuple(range(len(rows))), False)])["v"]
    assert list(line["complete"]) == [s == 0 and u == 0 for _, s, u, _ in rows]
    assert [", ".join(kinds) for kinds in line["incidents"]] == [
        text.replace("; ", ", ") for *_, text in rows]
