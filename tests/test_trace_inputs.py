"""Traces that are not what their name says: one line naming the file and the line, exit 2,
never a wait on a FIFO, never click's bare "Aborted!" for a truncated gzip."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

GOOD_LINE = '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}\n'
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{i:02d}.0000000,{100 + i},{10 + i}\n" for i in range(40))


def scenario(folder: Path, fmt: str, trace: str) -> Path:
    path = folder / "s.yaml"
    path.write_text(f"name: t\nengine: {{preset: lesson}}\n"
                    f"workload: {{kind: trace, format: {fmt}, path: {trace}}}\n")
    return path


def one_error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "Aborted" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("bad", "kind"), [("[1, 2, 3]", "list"), ("42", "int"),
                                           ('"text"', "str"), ("{not json", None)])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_mooncake_line_that_is_not_an_object(tmp_path, bad, kind, command):
    """A JSON line that is a list, a number or broken is named by its line (6 here)."""
    (tmp_path / "m.jsonl").write_text(GOOD_LINE * 5 + bad + "\n" + GOOD_LINE)
    path = scenario(tmp_path, "mooncake", "m.jsonl")
    out = tmp_path / "out"
    args = [command, str(path)] + (["--out", str(out)] if command == "run" else [])
    line = one_error(CliRunner().invoke(app, args))
    assert f"{path}:3: workload.path: {tmp_path / 'm.jsonl'} line 6: expected a JSON object" in line
    if kind:
        assert f"got {kind} " in line
    assert not out.exists()


def test_mooncake_timestamps_past_a_year_of_seconds_stay_milliseconds(tmp_path):
    """Mooncake's timestamps are milliseconds, however late the trace starts: pandas'
    date guessing read numbers past 31,536,000 in a `timestamp` column as epoch times."""
    (tmp_path / "m.jsonl").write_text("".join(
        f'{{"timestamp": {40_000_000 + 1000 * i}, "input_length": 600, "output_length": 20, '
        f'"hash_ids": [{2 * i}, {2 * i + 1}]}}\n' for i in range(4)))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(scenario(tmp_path, "mooncake", "m.jsonl")),
                                      "--out", str(out), "--no-check"])
    assert result.exit_code == 0, result.output
    rows = (out / "t" / "base" / "requests.csv").read_text().splitlines()[1:]
    assert [float(row.split(",")[1]) for row in rows] == [40_000.0, 40_001.0, 40_002.0,
                                                            40_003.0]


def test_good_mooncake_lines_still_read(tmp_path):
    (tmp_path / "m.jsonl").write_text(GOOD_LINE * 7)
    result = CliRunner().invoke(app, ["validate", str(scenario(tmp_path, "mooncake", "m.jsonl"))])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9])
def test_truncated_gzip_is_one_line(tmp_path, keep):
    """A .csv.gz cut short: one line saying so, exit 2 (click turned the EOFError into
    "Aborted!", exit 130)."""
    whole = gzip.compress(AZURE.encode() * 50)
    (tmp_path / "t.csv.gz").write_bytes(whole[:int(len(whole) * keep)])
    line = one_error(CliRunner().invoke(app, ["validate", str(scenario(tmp_path, "azure",
                                                                       "t.csv.gz"))]))
    assert "cannot parse '" in line and "t.csv.gz': " in line and "truncated or corrupt" in line


def test_corrupt_and_whole_gzip(tmp_path):
    (tmp_path / "g.csv.gz").write_bytes(b"garbage, not gzip")
    line = one_error(CliRunner().invoke(app, ["validate", str(scenario(tmp_path, "azure",
                                                                       "g.csv.gz"))]))
    assert "cannot parse '" in line and "g.csv.gz': " in line
    (tmp_path / "g.csv.gz").write_bytes(gzip.compress(AZURE.encode()))
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "s.yaml")])
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
@pytest.mark.parametrize("name", ["fifo.csv", "fifo.jsonl"])
def test_fifo_trace_is_refused_not_waited_on(tmp_path, name):
    """Nobody writes to the FIFO: a reader that opened it would block until the timeout."""
    os.mkfifo(tmp_path / name)
    path = scenario(tmp_path, "azure" if name.endswith("csv") else "mooncake", name)
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o")]):
        done = subprocess.run([sys.executable, "-m", "kvsched", *command], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().endswith(f"{name}' is not a regular file (a folder, a FIFO...)")
    assert not (tmp_path / "o").exists()
