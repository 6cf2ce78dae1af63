"""`format: burstgpt`: a trace format with a reader of its own (`TraceLayout.reader`), the
failed requests (`Response tokens` 0) dropped as BurstGPT's `*_without_fails` files drop them,
sessions kept; a file that is not BurstGPT's is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.scenario import load_scenario_text
from kvsched.workload import build_requests

HEADER = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
          "Total tokens,Log Type\n")
ROWS = [(5, "s1", 2.1, "ChatGPT", 472, 18, 490, "Conversation log"),
        (45, "s2", 3.0, "GPT-4", 1087, 0, 1087, "API log"),  # failed: no response
        (118, "s1", 1.2, "ChatGPT", 950, 331, 1281, "Conversation log"),
        (130, "s3", 0.4, "ChatGPT", 21, 1, 22, "API log")]


def write(folder: Path, rows=ROWS) -> Path:
    path = folder / "burst.csv"
    path.write_text(HEADER + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return path


def scenario_text(trace: Path) -> str:
    return (f"name: b\nengine: {{preset: lesson}}\ntime: {{kind: constant, step_time: 0.01}}\n"
            f"workload: {{kind: trace, format: burstgpt, path: {trace}}}\n")


def test_failed_requests_are_dropped_and_the_rest_replayed_in_order(tmp_path):
    scenario = load_scenario_text(scenario_text(write(tmp_path)), "b.yaml", tmp_path)
    requests = build_requests(scenario.variants[0].spec.workload, 0, tmp_path)
    assert [(r.arrival_time, r.prompt_len, r.output_len) for r in requests] == [
        (5.0, 472, 18), (118.0, 950, 331), (130.0, 21, 1)]
    assert [r.session for r in requests] == ["s1", "s1", "s3"]


def test_a_burstgpt_trace_runs_from_the_cli(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(scenario_text(write(tmp_path)))
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    assert '"num_requests": 3' in result.output


def test_a_file_that_is_not_burstgpts_is_one_line(tmp_path):
    trace = tmp_path / "burst.csv"
    trace.write_text("timestamp,input_length,output_length\n0,10,2\n")
    path = tmp_path / "b.yaml"
    path.write_text(scenario_text(trace))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "not a BurstGPT file" in lines[0] and "burst.csv" in lines[0]


def test_an_error_names_the_files_line_past_dropped_rows(tmp_path):
    """Rows the reader dropped still count: the bad row is named by its line in the file."""
    rows = [*ROWS[:2], (50, "s4", 1.0, "GPT-4", 300, 0, 300, "API log"),
            (60, "s5", 1.0, "ChatGPT", 0, 12, 12, "API log")]  # line 5: no prompt
    path = tmp_path / "b.yaml"
    path.write_text(scenario_text(write(tmp_path, rows)))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "burst.csv line 5: column 'Request tokens'" in result.stderr, result.stderr


def test_the_session_column_as_the_readme_spells_it(tmp_path):
    trace = write(tmp_path)
    trace.write_text(trace.read_text().replace("Session ID", "SessionID", 1))
    scenario = load_scenario_text(scenario_text(trace), "b.yaml", tmp_path)
    requests = build_requests(scenario.variants[0].spec.workload, 0, tmp_path)
    assert [r.session for r in requests] == ["s1", "s1", "s3"]


def test_a_truncated_compressed_burstgpt_file_is_one_line(tmp_path):
    """The format's own reader fails as pandas' reading does: one line naming the file and
    the likely cause, exit 2 (a truncated .gz raises EOFError, not a ValueError)."""
    import gzip

    whole = gzip.compress((HEADER + "".join(",".join(map(str, row)) + "\n"
                                            for row in ROWS * 50)).encode())
    trace = tmp_path / "burst.csv.gz"
    trace.write_bytes(whole[:len(whole) // 2])
    path = tmp_path / "b.yaml"
    path.write_text(scenario_text(trace))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "burst.csv.gz" in lines[0], result.stderr
    assert "truncated or corrupt compressed file" in lines[0]
