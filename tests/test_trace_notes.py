"""What `validate` says about a trace (requests, span, mean rate), and the unit slips a
trace's timestamps suggest: whole numbers thousands of 'seconds' apart, or a replay of hours
with the engine almost idle. Warnings go to stderr and never stop the run."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvsched.cli import app

SCENARIO = """\
name: notes
engine: {{max_num_batched_tokens: 512, num_blocks: 400, block_size: 16}}
time: {{kind: constant, step_time: 0.02}}
workload: {{kind: trace, path: trace.csv, {layout}}}
"""


def write(tmp_path: Path, times: list[float], layout: str = "format: kvsched") -> Path:
    rows = "".join(f"{t!r},32,4\n" for t in times)
    (tmp_path / "trace.csv").write_text("arrival_time,prompt_len,output_len\n" + rows)
    path = tmp_path / "notes.yaml"
    path.write_text(SCENARIO.format(layout=layout))
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_validate_prints_the_span_and_mean_rate(tmp_path):
    """11 requests over 100 s: 10 gaps in 100 s, 0.1 req/s."""
    path = write(tmp_path, [10.0 * i for i in range(11)])
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "  trace trace.csv: 11 requests over 100 s (0.1 req/s)" in result.stdout
    assert "warning" not in result.stderr


def test_span_is_as_replayed_with_time_scale(tmp_path):
    """time_scale 0.5 replays twice as fast: 50 s, 0.2 req/s; long spans read in hours."""
    path = write(tmp_path, [10.0 * i for i in range(11)], "format: kvsched, time_scale: 0.5")
    assert "11 requests over 50 s (0.2 req/s)" in invoke("validate", str(path)).stdout
    path = write(tmp_path, [720.5 * i for i in range(11)])
    assert "11 requests over 2 h (" in invoke("validate", str(path)).stdout


def test_whole_number_timestamps_thousands_apart_warn_as_milliseconds(tmp_path):
    """A millisecond column read as seconds: validate and run warn, naming the field and the
    fix; the run still writes its records."""
    path = write(tmp_path, [1500.0 * i for i in range(20)])
    checked = invoke("validate", str(path))
    assert checked.exit_code == 0
    assert (f"warning: {path}: workload.path: trace.csv's arrival times are whole numbers a "
            "median 1,500 s apart; set columns.arrival_unit: ms") in checked.stderr
    ran = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert ran.exit_code == 0, ran.output
    assert "whole numbers a median 1,500 s apart" in ran.stderr
    assert (tmp_path / "out" / "notes" / "summary.csv").exists()


def test_the_same_times_declared_as_milliseconds_are_quiet(tmp_path):
    """arrival_unit: ms says what the column holds: no warning, and the span is 28.5 s."""
    layout = ("columns: {arrival_time: arrival_time, prompt_len: prompt_len, "
              "output_len: output_len, arrival_unit: ms}")
    path = write(tmp_path, [1500.0 * i for i in range(20)], layout)
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert "20 requests over 28.5 s" in result.stdout
    assert "warning" not in result.stderr


def test_small_or_fractional_gaps_are_quiet(tmp_path):
    """Whole seconds a few apart, or fractional times however far apart, are seconds."""
    for times in ([3.0 * i for i in range(20)], [1500.25 * i + 0.5 for i in range(4)]):
        result = invoke("validate", str(write(tmp_path, times)))
        assert result.exit_code == 0 and "warning" not in result.stderr, result.output


def test_a_replay_of_hours_at_a_trickle_warns_after_the_run(tmp_path):
    """Five requests over four hours keep the engine busy far under 5% of the run."""
    path = write(tmp_path, [0.25 + 3600.5 * i for i in range(5)])
    assert "warning" not in invoke("validate", str(path)).stderr  # fractional: no gap slip
    ran = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert ran.exit_code == 0, ran.output
    assert (f"warning: {path}: workload.path: trace.csv spans 4 h and the engine was busy "
            in ran.stderr)
    assert "set columns.arrival_unit: ms" in ran.stderr


def test_a_busy_replay_of_minutes_is_quiet(tmp_path):
    path = write(tmp_path, [0.5 * i for i in range(50)])
    ran = invoke("run", str(path), "--out", str(tmp_path / "out"))
    assert ran.exit_code == 0, ran.output
    assert "warning" not in ran.stderr


def test_variants_replaying_differently_are_named(tmp_path):
    """Two windows of one trace: one line each, naming its variant."""
    path = write(tmp_path, [10.0 * i for i in range(11)])
    path.write_text(path.read_text() + "variants:\n  - {name: all}\n"
                    "  - {name: half, workload: {kind: trace, path: trace.csv, "
                    "format: kvsched, duration: 50}}\n")
    out = invoke("validate", str(path)).stdout
    assert "trace trace.csv (all): 11 requests over 100 s" in out
    assert "trace trace.csv (half): 5 requests over 40 s" in out
