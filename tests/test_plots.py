"""Pictures of runs and sweeps: valid PNG files, and series that come from the CSV records."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.errors import KvschedError
from kvsched.plots.folders import plot_folder
from kvsched.plots.run import (
    class_names,
    latency_points,
    plot_run_folder,
    timeline_series,
    ttft_cdf,
    wide_range,
)
from kvsched.plots.sweep import SweepAxis, read_sweep, sweep_lines, sweep_x_axis

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

STARVE_YAML = """
name: starve
description: Two request classes; at budget 128 the long prompts can never run.
seed: 7
engine: {max_num_batched_tokens: 2048, max_num_seqs: 256, block_size: 16, num_blocks: 2000,
         watermark: 0.01, preemption: recompute}
policy: fcfs
time: {kind: steps}
workload:
  kind: synthetic
  num_requests: 120
  arrival: {kind: poisson, rate: 0.2}
  mix:
    - {name: short, weight: 0.8, prompt_len: {kind: uniform, low: 16, high: 120},
       output_len: {kind: uniform, low: 16, high: 64}}
    - {name: long, weight: 0.2, prompt_len: {kind: uniform, low: 300, high: 1500},
       output_len: {kind: uniform, low: 16, high: 64}}
variants:
  - {name: wide}
  - {name: narrow, engine: {max_num_batched_tokens: 128}}
"""


def invoke(*args: object):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the PNG signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def assert_sensible_png(path: Path) -> None:
    width, height = png_size(path)
    assert 500 <= width <= 4000 and 300 <= height <= 3000, (path.name, width, height)
    assert imread(path).shape[:2] == (height, width)


@pytest.fixture(scope="module")
def lesson_run(tmp_path_factory) -> Path:
    """The lesson's demo run with --plot (one variant, step clock)."""
    out = tmp_path_factory.mktemp("lesson")
    result = invoke("run", SCENARIOS / "lesson.yaml", "--out", out, "--plot")
    assert result.exit_code == 0, result.output
    return out / "lesson"


@pytest.fixture(scope="module")
def starve_run(tmp_path_factory) -> Path:
    """STARVE_YAML run without pictures: two variants, request classes, starved requests."""
    out = tmp_path_factory.mktemp("starve")
    (out / "starve.yaml").write_text(STARVE_YAML)
    result = invoke("run", out / "starve.yaml", "--out", out)
    assert result.exit_code == 0, result.output
    return out / "starve"


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory) -> Path:
    """The lesson swept over three budgets and two policies, with --plot."""
    out = tmp_path_factory.mktemp("sweep")
    result = invoke("sweep", "--budget", "512..2048", "--policy", "fcfs,spf", "--out", out,
                    "--name", "t", "--plot")
    assert result.exit_code == 0, result.output
    return out / "sweep-t"


# -- the files ------------------------------------------------------------------------------


def test_run_plot_writes_valid_pngs(lesson_run):
    """`run --plot` writes a timeline per variant, ttft.png and latency.png, all valid PNGs."""
    for name in ("timeline-base.png", "ttft.png", "latency.png"):
        assert_sensible_png(lesson_run / name)


def test_plot_command_draws_every_variant(starve_run):
    """`kvsched plot` on a run folder writes one timeline per variant and says so."""
    result = invoke("plot", starve_run)
    assert result.exit_code == 0, result.output
    names = ["timeline-wide.png", "timeline-narrow.png", "ttft.png", "latency.png"]
    assert result.stdout.splitlines() == [f"wrote {starve_run / name}" for name in names]
    for name in names:
        assert_sensible_png(starve_run / name)
    assert not [p.name for p in starve_run.iterdir() if p.name.startswith(".")]


def test_sweep_plot_flag_and_plot_command_write_sweep_png(sweep_folder):
    """`sweep --plot` writes sweep.png, and `kvsched plot` on the sweep folder redraws it."""
    assert_sensible_png(sweep_folder / "sweep.png")
    (sweep_folder / "sweep.png").unlink()
    result = invoke("plot", sweep_folder)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {sweep_folder / 'sweep.png'}"
    assert_sensible_png(sweep_folder / "sweep.png")


def test_backpressure_is_drawn_when_recorded_and_skipped_otherwise(lesson_run, tmp_path):
    """Timelines plot with or without a backpressure column; the shading changes the picture."""
    folder = tmp_path / "lesson"
    shutil.copytree(lesson_run, folder)
    path = folder / "base" / "steps.csv"
    steps = pd.read_csv(path).drop(columns=["backpressure"], errors="ignore")
    pictures = []
    for frame in (steps, steps.assign(backpressure=steps["step"].between(40, 60).astype(int))):
        frame.to_csv(path, index=False)
        plot_run_folder(folder)
        assert_sensible_png(folder / "timeline-base.png")
        pictures.append((folder / "timeline-base.png").read_bytes())
    assert pictures[0] != pictures[1]


def test_bad_folder_exits_2_with_one_line(tmp_path):
    """A folder that is neither a run nor a sweep, or no folder at all: exit 2, one line."""
    for folder in (tmp_path, tmp_path / "missing"):
        result = invoke("plot", folder)
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(folder) in lines[0]


def test_missing_csv_is_named(starve_run, tmp_path):
    """A run folder missing a variant's steps.csv raises an error naming that file."""
    folder = tmp_path / "starve"
    shutil.copytree(starve_run, folder)
    (folder / "narrow" / "steps.csv").unlink()
    with pytest.raises(KvschedError, match=r"narrow/steps\.csv: missing"):
        plot_folder(folder)


def test_csv_without_needed_columns_is_named(starve_run, tmp_path):
    """A requests.csv without a ttft column is refused with the column named."""
    folder = tmp_path / "starve"
    shutil.copytree(starve_run, folder)
    path = folder / "wide" / "requests.csv"
    pd.read_csv(path).drop(columns=["ttft"]).to_csv(path, index=False)
    with pytest.raises(KvschedError, match="missing column.*ttft"):
        plot_folder(folder)


# -- the series -----------------------------------------------------------------------------


def test_timeline_series_keeps_totals_and_spikes(lesson_run):
    """Bucketing keeps every step, the token and preemption totals, and the largest spikes."""
    steps = pd.read_csv(lesson_run / "base" / "steps.csv")
    series = timeline_series(steps, max_points=10)
    assert len(series) <= 10 and len(steps) > 100
    assert series["num_steps"].sum() == len(steps)
    for column in ("prefill_tokens", "recomputed_tokens", "decode_tokens", "num_preempted"):
        assert series[column].sum() == steps[column].sum()
    assert series["peak_tokens"].max() == steps["budget_used"].max() > 1873  # r1's prefill
    for column in ("blocks_used", "num_waiting", "num_running"):
        assert series[column].max() == steps[column].max()
    assert list(series["step"]) == list(steps["step"].iloc[::series["num_steps"].iloc[0]])


def test_timeline_series_of_a_short_run_is_one_row_per_step(lesson_run):
    """A run shorter than max_points comes back step for step."""
    steps = pd.read_csv(lesson_run / "base" / "steps.csv")
    series = timeline_series(steps, max_points=len(steps))
    assert (series["num_steps"] == 1).all()
    np.testing.assert_array_equal(series["prefill_tokens"], steps["prefill_tokens"])
    np.testing.assert_array_equal(series["peak_tokens"], steps["budget_used"])


def test_timeline_series_carries_backpressure_only_when_recorded(lesson_run):
    """No backpressure column in, none out; recorded, a bucket is marked if any step was."""
    steps = pd.read_csv(lesson_run / "base" / "steps.csv")
    steps = steps.drop(columns=["backpressure"], errors="ignore")
    assert "backpressure" not in timeline_series(steps, 10).columns
    flagged = steps.assign(backpressure=(steps["step"] == 50).astype(int))
    series = timeline_series(flagged, 10)
    marked = series[series["backpressure"] == 1]
    assert len(marked) == 1
    start = int(marked["step"].iloc[0])
    assert start <= 50 < start + int(marked["num_steps"].iloc[0])


def test_timeline_series_of_no_steps_is_empty():
    """A run that executed no step gives an empty series with the usual columns."""
    steps = pd.DataFrame({column: [] for column in (
        "step", "time", "prefill_tokens", "recomputed_tokens", "decode_tokens", "budget_used",
        "blocks_used", "num_waiting", "num_running", "num_preempted")})
    series = timeline_series(steps)
    assert series.empty and {"peak_tokens", "prefill_tokens", "num_steps"} <= set(series.columns)


def test_ttft_cdf_ends_at_one_over_requests_with_a_token(starve_run):
    """The CDF runs over the requests that got a first token, sorted, ending at 1."""
    requests = pd.read_csv(starve_run / "narrow" / "requests.csv")
    cdf = ttft_cdf(requests)
    with_token = requests["ttft"].dropna()
    assert 0 < len(cdf) == len(with_token) < len(requests)
    np.testing.assert_array_equal(cdf["ttft"], np.sort(with_token.to_numpy()))
    assert cdf["fraction"].iloc[-1] == 1.0
    assert cdf["fraction"].is_monotonic_increasing and cdf["ttft"].is_monotonic_increasing


def test_latency_points_put_starved_requests_apart(starve_run):
    """Starved requests have no TTFT: they are the 'apart' set; every other one is served."""
    requests = pd.read_csv(starve_run / "narrow" / "requests.csv")
    points = latency_points(requests)
    starved = set(requests.loc[requests["status"] == "starved", "request_id"])
    assert starved and set(points.apart["request_id"]) == starved
    assert points.served["ttft"].notna().all()
    assert len(points.served) + len(points.apart) == len(requests)


def test_class_names_come_from_the_requests(lesson_run, starve_run):
    """Classes are listed when requests carry them, and none otherwise."""
    classes = pd.read_csv(starve_run / "wide" / "requests.csv")
    plain = pd.read_csv(lesson_run / "base" / "requests.csv")
    assert class_names([classes, plain]) == ["long", "short"]
    assert class_names([plain]) == []


def test_sweep_lines_one_line_per_policy(sweep_folder):
    """A budget x policy sweep: budget along x, one line per policy, values from summary.csv."""
    _, axes, frame = read_sweep(sweep_folder)
    lines = sweep_lines(frame, axes)
    assert list(lines) == ["policy=fcfs", "policy=spf"]
    for policy, line in zip(("fcfs", "spf"), lines.values(), strict=True):
        assert list(line["x"]) == [512, 1024, 2048]
        rows = frame[frame["policy"] == policy].sort_values("engine.max_num_batched_tokens")
        np.testing.assert_array_equal(line["num_preemptions"], rows["num_preemptions"])
        np.testing.assert_array_equal(line["ttft_p99"], rows["ttft_p99"])


def test_sweep_x_axis_is_the_longest_numeric_axis():
    """x is the numeric axis with the most values; categorical axes only when nothing else."""
    budget = SweepAxis("engine.max_num_batched_tokens", "--budget", (512, 2048), False)
    blocks = SweepAxis("engine.num_blocks", "--blocks", (60, 120, 180), False)
    policy = SweepAxis("policy", "--policy", ("fcfs", "spf", "priority", "x"), False)
    assert sweep_x_axis([budget, blocks, policy]) is blocks
    assert sweep_x_axis([budget, policy]) is budget
    assert sweep_x_axis([policy]) is policy


def test_sweep_lines_on_a_categorical_axis():
    """A sweep over policies only: x is each policy's position, one line per variant."""
    axes = [SweepAxis("policy", "--policy", ("spf", "fcfs"), False)]
    frame = pd.DataFrame({"policy": ["spf", "spf", "fcfs", "fcfs"],
                          "variant": ["a", "b", "a", "b"], "ttft_p50": [1.0, 2.0, 3.0, 4.0],
                          "ttft_p99": [5.0] * 4, "throughput": [6.0] * 4,
                          "num_preemptions": [0, 1, 2, 3]})
    lines = sweep_lines(frame, axes)
    assert list(lines) == ["a", "b"]
    assert list(lines["a"]["x"]) == [0, 1] and list(lines["a"]["ttft_p50"]) == [1.0, 3.0]
    assert list(lines["b"]["num_preemptions"]) == [1, 3]


def test_wide_range_means_more_than_two_decades():
    """A log axis is wanted once positive values span more than a factor of 100."""
    assert wide_range([1, 101]) and wide_range([0.01, np.nan, 5])
    assert not wide_range([1, 100]) and not wide_range([0, 1000]) and not wide_range([])


# -- pictures that show the incident ----------------------------------------------------------


def test_lifecycle_series_counts_to_the_end_of_the_run(starve_run):
    """Requests over the run's clock: everyone arrives, the starved are counted by arrival,
    and arrived = finished + waiting-or-running at every time."""
    from kvsched.plots.run import lifecycle_series

    requests = pd.read_csv(starve_run / "narrow" / "requests.csv")
    series = lifecycle_series(requests)
    last = series.iloc[-1]
    assert last["arrived"] == len(requests)
    assert last["starved"] == (requests["status"] == "starved").sum() > 0
    assert last["finished"] == (requests["status"] == "finished").sum()
    assert series["time"].iloc[-1] >= requests["arrival_time"].max()
    assert (series["waiting"] >= series["starved"]).all()
    assert (series["arrived"] >= series["finished"] + series["waiting"]).all()


def test_timeline_reaches_the_end_of_the_run_and_scales_the_pool(starve_run):
    """narrow starves requests long after its last step: the timeline's bottom panel runs to
    the last arrival, and the KV panel is scaled to what was used (pool far above)."""
    from kvsched.plots.run import draw_timeline, read_variant

    records = read_variant(starve_run / "narrow")
    fig = draw_timeline(records)
    tokens_ax, blocks_ax, queue_ax = fig.subfigs[0].axes[:3]
    lifecycle_ax = fig.subfigs[1].axes[0]
    last_step_end = records.steps["step"].iloc[-1] + 1
    assert queue_ax.get_xlim()[1] == last_step_end
    assert lifecycle_ax.get_xlim()[1] >= records.requests["arrival_time"].max() > last_step_end
    labels = lifecycle_ax.get_legend_handles_labels()[1]
    starved = (records.requests["status"] == "starved").sum()
    assert f"starved ({starved:,} at the end)" in labels
    peak = records.steps["blocks_used"].max()
    assert peak < records.num_blocks / 2
    assert blocks_ax.get_ylim()[1] < records.num_blocks
    assert any("above: peak use" in label for label in blocks_ax.get_legend_handles_labels()[1])


def test_swap_thrash_and_slo_are_drawn(tmp_path):
    """Under swap, the blocks moved and the thrash ratio are drawn; an SLO is a line in
    ttft.png and latency.png; identical variants get different line styles."""
    from kvsched.plots.run import draw_timeline, draw_ttft, read_run

    text = (SCENARIOS / "pool60.yaml").read_text() + "slo: {ttft: 5}\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert invoke("run", path, "--out", tmp_path, "--variant", "pool60",
                  "--variant", "pool60_swap", "--set", "name=p").exit_code == 0
    variants = read_run(tmp_path / "p")
    swap = next(v for v in variants if v.name == "pool60_swap")
    assert swap.ttft_slo == 5
    labels = draw_timeline(swap).subfigs[0].axes[1].get_legend_handles_labels()[1]
    assert any(label.startswith("swapped out + in") for label in labels)
    assert any(label.startswith("thrash ratio") for label in labels)
    ttft = draw_ttft(variants)
    ax = ttft.axes[0]
    assert any(label.startswith("TTFT SLO 5") for label in ax.get_legend_handles_labels()[1])
    styles = {line.get_linestyle() for line in ax.get_lines() if line.get_label().startswith(
        ("pool60:", "pool60_swap:"))}
    assert len(styles) == 2


def test_sweep_title_names_every_swept_axis(sweep_folder):
    """The sweep picture's title names the axis along x and the ones that make the lines."""
    from kvsched.plots.sweep import draw_sweep

    info, axes, frame = read_sweep(sweep_folder)
    title = draw_sweep(axes, frame, "t").get_suptitle()
    assert "engine.max_num_batched_tokens (--budget) along x" in title
    assert "one line per value of policy (--policy)" in title


def test_compact_and_summary_records_still_draw(tmp_path):
    """--records compact expands its stretches for the timeline; --records summary draws
    what needs no steps (ttft.png, latency.png)."""
    from typer.testing import CliRunner

    from kvsched.cli import app
    from kvsched.plots.run import expand_compact, read_csv

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nengine: {num_blocks: 64}\ntime: {kind: constant, step_time: 0.01}\n"
        "workload: {kind: inline, requests: [{arrival: 0, prompt_len: 30, output_len: 90},"
        " {arrival: 0.2, prompt_len: 20, output_len: 60}]}\n")
    runner = CliRunner()
    for mode, pictures in (("full", 3), ("compact", 3), ("summary", 2)):
        out = tmp_path / mode
        result = runner.invoke(app, ["run", str(scenario), "--out", str(out), "--records",
                                     mode, "--plot"])
        assert result.exit_code == 0, result.output
        assert "plots not drawn" not in result.output
        assert len(list((out / "s").glob("*.png"))) == pictures
    full = read_csv(tmp_path / "full" / "s" / "base" / "steps.csv")
    expanded = expand_compact(read_csv(tmp_path / "compact" / "s" / "base" / "steps.csv"))
    assert list(expanded["step"]) == list(full["step"])
    assert list(expanded["blocks_used"])[-1] == list(full["blocks_used"])[-1]
    assert abs(expanded["decode_tokens"].sum() - full["decode_tokens"].sum()) < 1e-9


# -- run pictures that cannot crown a starving variant ----------------------------------------


def test_ttft_share_ends_at_the_part_of_all_requests_with_a_token(starve_run):
    """Drawn over all the requests: a variant that starves ends below 1, at its share."""
    from kvsched.plots.run import ttft_share

    requests = pd.read_csv(starve_run / "narrow" / "requests.csv")
    share = ttft_share(requests)
    got = requests["ttft"].notna().sum()
    assert share["share"].iloc[-1] == pytest.approx(got / len(requests))
    assert got < len(requests)
    np.testing.assert_array_equal(share["ttft"], ttft_cdf(requests)["ttft"])


def test_ttft_png_shows_what_each_variant_completed_and_its_incidents(starve_run):
    """Beside the curves, a bar per variant stacks its requests by outcome (the counts of
    requests.csv) and names the diagnosis' incidents."""
    from kvsched.plots.run import draw_ttft, read_run, request_outcomes

    variants = read_run(starve_run)
    figure = draw_ttft(variants)
    outcomes = figure.axes[-1]
    assert [label.get_text() for label in outcomes.get_yticklabels()] == ["wide", "narrow"]
    for records, row in zip(variants, (0, 1), strict=True):
        counts = dict(request_outcomes(records.requests))
        total = sum(counts.values())
        bars = {patch.get_gid(): patch.get_width() for patch in outcomes.patches
                if abs(patch.get_y() + patch.get_height() / 2 - row) < 1e-9
                and patch.get_width() > 0}
        assert bars == pytest.approx({f"outcome-{status}": n / total
                                      for status, n in counts.items()})
    narrow = next(v for v in variants if v.name == "narrow")
    assert "starvation" in narrow.incidents
    notes = [t.get_text() for t in outcomes.texts if t.get_gid() == "incidents"]
    assert notes[0] == "no incident" and "starvation" in notes[1]
    curve = next(line for line in figure.axes[0].get_lines()
                 if line.get_label().startswith("narrow:"))
    assert max(curve.get_ydata()) < 1  # the starving variant's curve ends low


def test_latency_png_titles_say_completed_and_incidents(starve_run):
    from kvsched.plots.run import draw_latency, read_run

    variants = read_run(starve_run)
    titles = [ax.get_title() for ax in draw_latency(variants).axes[:2]]
    narrow = next(v for v in variants if v.name == "narrow")
    done = dict(narrow.outcomes)["finished"]
    assert titles[0] == "wide: 120/120 completed\nno incident"
    assert titles[1].startswith(f"narrow: {done}/120 completed\nstarvation")


def test_run_plot_prints_each_picture_it_wrote(tmp_path):
    """`run --plot` (what make experiments runs) names every PNG it wrote; with --json
    they go to stderr, stdout staying JSON."""
    (tmp_path / "s.yaml").write_text(STARVE_YAML)
    result = invoke("run", tmp_path / "s.yaml", "--out", tmp_path, "--plot")
    assert result.exit_code == 0, result.output
    wrote = [line.removeprefix("wrote ") for line in result.stdout.splitlines()
             if line.startswith("wrote ")]
    assert sorted(Path(p).name for p in wrote) == sorted(
        ["timeline-wide.png", "timeline-narrow.png", "ttft.png", "latency.png"])
    for path in wrote:
        assert_sensible_png(Path(path))
    as_json = invoke("run", tmp_path / "s.yaml", "--out", tmp_path, "--plot", "--json")
    assert as_json.exit_code == 0, as_json.output
    import json

    assert len(json.loads(as_json.stdout)) == 2
    assert sum(line.startswith("wrote ") for line in as_json.stderr.splitlines()) == 4
