"""A long run, sweep or capacity search is never silent: off a terminal, plain progress lines
on stderr once it has run a few seconds (a short command stays quiet); on a terminal the
capacity bar moves with every probe."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_capacity import SMALL
from typer.testing import CliRunner

from kvsched.analysis.capacity import Probe, SloTarget, run_capacity
from kvsched.analysis.sweep import SweepSource
from kvsched.cli import app
from kvsched.cli import progress as cli_progress
from kvsched.cli.progress import CountTally, Heartbeat, ProbeTally, RunTally, elapsed_text

ROOT = Path(__file__).resolve().parents[1]

LONG_RUN = """\
name: long
seed: 1
engine: {max_num_batched_tokens: 2048, num_blocks: 4000}
time: {kind: constant, step_time: 0.01}
workload: {kind: synthetic, num_requests: %d, arrival: {kind: poisson, rate: 50},
           prompt_len: {kind: uniform, low: 20, high: 200}, output_len: 20}
"""


def heartbeat_lines(stderr: str, command: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"kvsched {command}: ")]


@pytest.fixture()
def often(monkeypatch):
    """Heartbeats from the start and every 20 ms (5 s, then 15 s, in use)."""
    monkeypatch.setattr(cli_progress, "FIRST", 0.0)
    monkeypatch.setattr(cli_progress, "EVERY", 0.02)


# -- the heartbeat ----------------------------------------------------------------------------


def test_heartbeat_prints_its_status_as_it_changes_and_stops_with_the_block():
    stream = io.StringIO()
    with Heartbeat("run", "reading", first=0.0, every=0.01, stream=stream) as beat:
        time.sleep(0.1)
        beat.status = lambda: "running x/y"
        time.sleep(0.1)
    written = stream.getvalue()
    time.sleep(0.05)
    assert stream.getvalue() == written  # the thread ended with the block
    lines = written.splitlines()
    assert lines[0].startswith("kvsched run: reading (") and lines[0].endswith(" s)")
    assert lines[-1].startswith("kvsched run: running x/y (")


def test_a_short_command_prints_no_heartbeat():
    stream = io.StringIO()
    with Heartbeat("run", "reading", first=5.0, every=1.0, stream=stream):
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_a_status_that_fails_mid_update_says_working():
    def broken() -> str:
        raise KeyError("x")

    assert Heartbeat("sweep", broken).line().startswith("kvsched sweep: working (")


def test_elapsed_text():
    assert [elapsed_text(s) for s in (0.4, 59.9, 65, 3599, 3725)] == [
        "0 s", "59 s", "1 min 05 s", "59 min 59 s", "1 h 02 min"]


def test_tallies_say_where_the_work_is():
    run = RunTally("pool60", {"baseline": "s", "steps": "steps"})
    assert run.text() == "running pool60"
    run.update("baseline", 1234, 10_000, 56.7)
    assert run.text() == ("running pool60/baseline: 1,234 of 10,000 requests arrived, "
                          "simulated time 56.7 s")
    run.update("steps", 5, 0, 812)
    assert run.text() == "running pool60/steps: 5 requests arrived, step 812"
    count = CountTally("running sweep-x", 99_856, "runs")
    assert count.text() == "running sweep-x: 0 of 99,856 runs done"
    count.advance()
    assert count.text().startswith("running sweep-x: 1 of 99,856 runs done, about ")


def test_probe_tally_moves_with_every_probe_and_ends_at_its_total():
    """Each probe adds one to what is done; the estimate of the whole is never below it,
    and once every search has ended it is exactly the probes run."""
    tally = ProbeTally(["a", "b"], 0.02, "s")
    assert (tally.done, tally.total) == (0, 2 * cli_progress.BRACKET_GUESS)
    steps = [(0, 1.0, True), (0, 2.0, False), (1, 1.0, False), (0, 1.4, True),
             (0, 1.6, False), (1, 0.5, True), (0, 1.5, True), (0, 1.53, False)]
    for n, (index, scale, holds) in enumerate(steps, start=1):
        tally.probe(index, Probe(scale, 10 * scale, (1.0,), holds))
        assert tally.done == n and tally.total >= n
    assert tally.latest() == "a: probe 6 at 15.3 requests/s fails"
    tally.search_done()  # a's bracket (1.5, 1.53) has closed: a is the one that ended
    assert tally.finished == [True, False]
    tally.search_done()
    assert tally.total == tally.done == len(steps)
    assert tally.text("capacity-x").startswith("capacity-x: 2 of 2 searches done, 8 probes")


# -- through the commands ---------------------------------------------------------------------


def test_run_off_a_terminal_says_how_far_it_got(tmp_path):
    """A run of some seconds with stderr to a pipe: plain lines naming the scenario, the
    variant, the requests arrived and the simulated time (a fresh process, as a user's)."""
    (tmp_path / "long.yaml").write_text(LONG_RUN % 300_000)
    # Each progress report then holds the run 0.1 s, so that heartbeats land while it runs
    # however fast the machine (a quiet one simulates these requests in a fraction of 0.2 s).
    code = ("import kvsched.cli.progress as p; p.FIRST = 0.05; p.EVERY = 0.02\n"
            "import time, kvsched.runner as r\n"
            "def slow(*args, progress=None, **kwargs):\n"
            "    def held(*a):\n"
            "        progress(*a); time.sleep(0.1)\n"
            "    return plain(*args, progress=held if progress else None, **kwargs)\n"
            "plain = r.simulate; r.simulate = slow\n"
            "import sys; from kvsched.cli import main\n"
            f"sys.argv = ['kvsched', 'run', {str(tmp_path / 'long.yaml')!r}, '--records', "
            f"'summary', '--out', {str(tmp_path / 'o')!r}]\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = heartbeat_lines(done.stderr, "run")
    arrived = [line for line in lines if "requests arrived" in line]
    assert arrived, done.stderr
    assert arrived[0].startswith("kvsched run: running long/base: ")
    assert " of 300,000 requests arrived, simulated time " in arrived[0]
    assert "kvsched run:" not in done.stdout


def test_run_prints_nothing_more_when_it_is_short(tmp_path):
    """The default: a first line only after 5 s; the lesson's run takes well under that."""
    result = CliRunner().invoke(app, ["run", str(ROOT / "scenarios" / "lesson.yaml"),
                                      "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not heartbeat_lines(result.stderr, "run")


def test_sweep_off_a_terminal_counts_points_checked_and_run(often, monkeypatch, tmp_path):
    # Each point held 2 ms, so that heartbeats land while the points run however fast the
    # machine (a quiet one runs the 200 lesson points in well under one 20 ms beat).
    from kvsched.analysis import sweep

    plain = sweep.run_variant

    def held(*args, **kwargs):
        time.sleep(0.002)
        return plain(*args, **kwargs)

    monkeypatch.setattr(sweep, "run_variant", held)
    result = CliRunner().invoke(app, ["sweep", "--budget", "64..263:+1", "--out",
                                      str(tmp_path), "--plot"])
    assert result.exit_code == 0, result.output
    lines = heartbeat_lines(result.stderr, "sweep")
    assert any(" of 200 runs done" in line for line in lines), lines
    assert any(line.startswith("kvsched sweep: running sweep-lesson: ") for line in lines)
    assert any("drawing" in line and "sweep.png" in line for line in lines)


def test_capacity_off_a_terminal_names_its_probes(often, monkeypatch, tmp_path):
    from kvsched.analysis import capacity

    plain = capacity.run_probe

    def slow(*args, **kwargs):  # a probe of 0.05 s at least: heartbeats land during probes
        time.sleep(0.05)  # however fast the machine (a quiet one runs them all in 0.1 s)
        return plain(*args, **kwargs)

    monkeypatch.setattr(capacity, "run_probe", slow)
    (tmp_path / "s.yaml").write_text(SMALL)
    result = CliRunner().invoke(app, ["capacity", str(tmp_path / "s.yaml"), "--slo",
                                      "ttft_p99=0.5", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = heartbeat_lines(result.stderr, "capacity")
    probing = [line for line in lines if " probes run (about " in line]
    assert probing, lines
    assert any(": probe " in line and " requests/s " in line for line in probing)


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_probe_is_reported_as_it_ends(jobs):
    """`on_probe` hears each probe of each search once, here or on shared workers: what
    the bar counts is what the searches ran."""
    heard: dict[int, list[Probe]] = {}
    results = run_capacity(SweepSource(SMALL, "small.yaml", ROOT), [SloTarget("ttft_p99", 0.5)],
                           tolerance=0.1, jobs=jobs,
                           on_probe=lambda i, probe: heard.setdefault(i, []).append(probe))
    assert sorted(heard) == [0, 1]
    for index, result in enumerate(results):
        probes = heard[index]
        assert {p.scale for p in probes} == {p.scale for p in result.probes}
        again = len(probes) - len(result.probes)  # an early-stopped answer above, run in full
        assert again in (0, 1)
        if again:
            twice = [p for p in probes if p.scale == result.scale_above]
            assert [p.aborted for p in twice] == [True, False]


def test_the_capacity_bar_moves_with_its_probes(tmp_path):
    """On a terminal (rich told so by FORCE_COLOR): the bar's probe count climbs while one
    search runs, where it sat at 0/1 until the search ended."""
    env = {**os.environ, "FORCE_COLOR": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "kvsched", "capacity",
                           str(ROOT / "scenarios" / "pool60.yaml"), "--slo", "ttft_p99=2",
                           "--variant", "pool60", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    import re

    counts = [int(n) for n in re.findall(r"(\d+) of about \d+ probes", done.stderr)]
    assert len(set(counts)) >= 3, done.stderr[-2000:]
    assert counts == sorted(counts)
    assert not heartbeat_lines(done.stderr, "capacity")  # the bar speaks, not the lines
