"""`kvsched report` and `run --report / --trace-out`: one self-contained report.html per run
folder, never stale; the Chrome trace's required fields; bad input is one line, exit 2, with
nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.errors import KvschedError
from kvsched.report_view import trace as trace_module
from kvsched.report_view.run_view import read_run
from kvsched.report_view.trace import Trace

SMALL = """\
name: small
seed: 1
engine: {max_num_batched_tokens: 512, num_blocks: 40, block_size: 16}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.0005}
workload: {kind: synthetic, num_requests: 40, arrival: {kind: poisson, rate: 4},
           prompt_len: {kind: uniform, low: 40, high: 200}, output_len: {kind: uniform, low: 20,
           high: 80}}
variants:
  - {name: roomy, engine: {num_blocks: 400}}
  - {name: tight}
  - {name: tight_swap, engine: {preemption: swap}}
"""
CLUSTER = """\
name: fleet
seed: 2
engine: {max_num_batched_tokens: 512, num_blocks: 60, block_size: 16}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.0005}
workload: {kind: synthetic, num_requests: 40, arrival: {kind: poisson, rate: 6},
           prompt_len: 100, output_len: 30}
cluster: {replicas: 2, router: round_robin}
"""


def invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def run_ok(*args: object):
    done = invoke(*args)
    assert done.exit_code == 0, done.output
    return done


def test_run_report_writes_one_self_contained_file(small, tmp_path):
    done = run_ok("run", small, "--out", tmp_path / "r", "--report")
    page = tmp_path / "r" / "small" / "report.html"
    assert f"wrote {page}" in done.output
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in text
    assert not re.search(r"(src|href)=\"(https?:)?//", text)  # loads nothing
    data = json.loads(re.search(r'id="kvsched-data">(.*?)</script>', text, re.S).group(1))
    assert [v["name"] for v in data["variants"]] == ["roomy", "tight", "tight_swap"]
    assert data["variants"][0]["replicas"][0]["timeline"]["levels"]


def test_the_report_is_a_reader_records_unchanged_and_bytes_repeat(small, tmp_path):
    run_ok("run", small, "--out", tmp_path / "a", "--report")
    run_ok("run", small, "--out", tmp_path / "b")
    for name in ("summary.csv", "tight/steps.csv", "tight/requests.csv", "tight/events.csv",
                 "tight/summary.json"):
        assert (tmp_path / "a" / "small" / name).read_bytes() == (
            tmp_path / "b" / "small" / name).read_bytes()
    first = (tmp_path / "a" / "small" / "report.html").read_bytes()
    run_ok("report", tmp_path / "b" / "small")
    assert (tmp_path / "b" / "small" / "report.html").read_bytes() == first
    run_ok("report", tmp_path / "b" / "small")
    assert (tmp_path / "b" / "small" / "report.html").read_bytes() == first


def test_a_later_run_never_leaves_a_stale_report(small, tmp_path):
    out = tmp_path / "r"
    run_ok("run", small, "--out", out, "--report")
    run_ok("run", small, "--out", out, "--variant", "tight")
    assert not (out / "small" / "report.html").exists()
    assert (out / "small" / "roomy" / "run.json").is_file()  # the other variants are kept
    run_ok("run", small, "--out", out, "--variant", "tight", "--report")
    text = (out / "small" / "report.html").read_text(encoding="utf-8")
    assert all(f'"name":"{v}"' in text for v in ("roomy", "tight", "tight_swap"))
    run_ok("run", small, "--out", out)
    assert not (out / "small" / "report.html").exists()


def test_a_later_run_of_some_variants_leaves_no_stale_picture(small, tmp_path):
    """ttft.png and latency.png draw every variant, a timeline its variant: a rerun of one
    variant without --plot drops those that would show its old results, keeps the others'."""
    out = tmp_path / "r"
    run_ok("run", small, "--out", out, "--plot")
    folder = out / "small"
    assert {p.name for p in folder.glob("*.png")} == {
        "ttft.png", "latency.png", "timeline-roomy.png", "timeline-tight.png",
        "timeline-tight_swap.png"}
    run_ok("run", small, "--out", out, "--variant", "tight")
    assert {p.name for p in folder.glob("*.png")} == {"timeline-roomy.png",
                                                       "timeline-tight_swap.png"}
    run_ok("run", small, "--out", out, "--variant", "tight", "--plot")  # drawn over all again
    assert {"ttft.png", "latency.png", "timeline-tight.png"} <= {
        p.name for p in folder.glob("*.png")}


def test_a_rerun_drops_its_replicas_timelines(tmp_path):
    """A cluster variant draws timeline-<variant>-r<i>.png: rerun without --plot, they go,
    the other variant's stay. (A name both a replica's timeline and another variant's own,
    as base-r0's timeline-base-r0.png, is kept: which it is cannot be told by its name.)"""
    path = tmp_path / "fleet.yaml"
    path.write_text(CLUSTER + "variants:\n  - {name: base}\n  - {name: other}\n")
    out = tmp_path / "r"
    run_ok("run", path, "--out", out, "--plot")
    folder = out / "fleet"
    assert {p.name for p in folder.glob("timeline-*.png")} == {
        "timeline-base-r0.png", "timeline-base-r1.png", "timeline-other-r0.png",
        "timeline-other-r1.png"}
    run_ok("run", path, "--out", out, "--variant", "base")
    assert {p.name for p in folder.glob("timeline-*.png")} == {"timeline-other-r0.png",
                                                               "timeline-other-r1.png"}


@pytest.mark.parametrize("records", ["compact", "summary"])
def test_every_record_mode_gives_a_report(small, tmp_path, records):
    run_ok("run", small, "--out", tmp_path, "--records", records, "--report")
    text = (tmp_path / "small" / "report.html").read_text(encoding="utf-8")
    assert ('"timeline":null' in text) == (records == "summary")


def check_trace(path: Path) -> dict:
    """The trace event format's required fields (the JSON object form)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data["traceEvents"], list) and data["traceEvents"]
    for event in data["traceEvents"]:
        assert event["ph"] in ("X", "C", "M"), event
        assert isinstance(event["name"], str) and isinstance(event["pid"], int)
        if event["ph"] == "X":
            assert isinstance(event["tid"], int)
            assert isinstance(event["ts"], int | float) and event["dur"] >= 0
        elif event["ph"] == "C":
            assert isinstance(event["ts"], int | float)
            assert all(isinstance(v, int | float) for v in event["args"].values())
        else:
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert "name" in event["args"] or "sort_index" in event["args"]
    return data


def test_trace_has_steps_requests_and_counters_per_variant(small, tmp_path):
    out = tmp_path / "trace.json"
    done = run_ok("run", small, "--out", tmp_path / "r", "--trace-out", out)
    assert re.search(rf"wrote {re.escape(str(out))} \([\d,]+ events\)", done.output)
    data = check_trace(out)
    events = data["traceEvents"]
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {"roomy", "tight", "tight_swap"}
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"steps", "incidents", "r0", "r39"} <= threads
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"step", "queued", "prefill", "decode", "preempted", "swapped"} <= names
    assert {e["name"] for e in events if e["ph"] == "C"} == {"queue", "KV blocks"}
    steps = [e for e in events if e["name"] == "step"]
    assert {"num_running", "num_waiting", "prefill_tokens", "decode_tokens",
            "blocks_used"} <= set(steps[0]["args"])
    assert data["otherData"]["num_events"] == len(events)


def test_trace_window_keeps_what_overlaps_it(small, tmp_path):
    run_ok("run", small, "--out", tmp_path / "r")
    out = tmp_path / "w.json"
    run_ok("report", tmp_path / "r" / "small", "--trace-out", out, "--trace-window", "2..3")
    timed = [e for e in check_trace(out)["traceEvents"] if e["ph"] == "X"]
    assert timed
    for e in timed:
        if e["cat"] != "incident":
            assert e["ts"] <= 3e6 and e["ts"] + e["dur"] >= 2e6


def test_a_cluster_has_a_process_and_a_timeline_per_replica(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(CLUSTER)
    run_ok("run", path, "--out", tmp_path / "r", "--report", "--trace-out", tmp_path / "t.json")
    data = check_trace(tmp_path / "t.json")
    assert {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"} == {
        "base / replica 0", "base / replica 1"}
    view = read_run(tmp_path / "r" / "fleet").variants[0]
    assert view.replicas == (0, 1)
    text = (tmp_path / "r" / "fleet" / "report.html").read_text(encoding="utf-8")
    assert text.count('"replica":0,"num_blocks"') == 1
    assert text.count('"replica":1,"num_blocks"') == 1


def test_a_trace_over_the_limit_is_refused_naming_the_window(small, tmp_path, monkeypatch):
    run_ok("run", small, "--out", tmp_path / "r")
    folder = tmp_path / "r" / "small"
    with pytest.raises(KvschedError, match="give a shorter --trace-window START..END"):
        Trace(read_run(folder), max_events=100)
    monkeypatch.setattr(trace_module, "MAX_EVENTS", 100)
    done = invoke("report", folder, "--trace-out", tmp_path / "t.json")
    assert done.exit_code == 2
    assert re.fullmatch(r"error: --trace-out: the trace of .* would hold [\d,]+ events, more "
                        r"than 100; give a shorter --trace-window START\.\.END \(the run spans "
                        r"0\.\.[\d.]+ s\)\n", done.output)
    assert not (tmp_path / "t.json").exists()
    assert not (folder / "report.html").exists()  # refused before anything is written


@pytest.mark.parametrize("args, message", [
    (["--trace-window", "1..2"], "--trace-window: give --trace-out FILE.json too"),
    (["--trace-out", "T", "--trace-window", "3..1"], "--trace-window: expected START < END"),
    (["--trace-out", "T", "--trace-window", "soon"], "--trace-window: expected START..END"),
    (["--trace-out", "NOWHERE/t.json"], "--trace-out: NOWHERE/t.json: no such folder"),
    (["--trace-out", "DIR"], "--trace-out: DIR is a folder"),
])
def test_bad_trace_options_are_one_line_and_nothing_runs(small, tmp_path, args, message):
    args = [a.replace("T", str(tmp_path / "t.json")) if a == "T" else a for a in args]
    args = [str(tmp_path / a) if a.startswith(("NOWHERE", "DIR")) else a for a in args]
    (tmp_path / "DIR").mkdir()
    message = message.replace("NOWHERE", str(tmp_path / "NOWHERE")).replace(
        "DIR", str(tmp_path / "DIR"))
    done = invoke("run", small, "--out", tmp_path / "r", *args)
    assert done.exit_code == 2
    assert done.output.startswith(f"error: {message}") and done.output.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_one_trace_per_run_folder(small, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(SMALL.replace("name: small", "name: other"))
    done = invoke("run", small, other, "--out", tmp_path / "r", "--trace-out", tmp_path / "t.json")
    assert done.exit_code == 2 and "--trace-out: give one scenario (got 2)" in done.output
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "summary.csv").unlink(), "not a run folder (no summary.csv"),
    (lambda f: (f / "tight" / "run.json").write_text("{"), "tight/run.json: not readable JSON"),
    (lambda f: (f / "tight" / "requests.csv").write_text("request_id\nr0\n"),
     "tight/requests.csv: missing column(s) arrival_time"),
    (lambda f: (f / "summary.csv").write_text("variant\n../x\n"),
     "summary.csv: variant: '../x' is not a folder name"),
])
def test_a_damaged_folder_is_one_line_naming_the_file(small, tmp_path, damage, message):
    run_ok("run", small, "--out", tmp_path / "r")
    folder = tmp_path / "r" / "small"
    damage(folder)
    done = invoke("report", folder)
    assert done.exit_code == 2
    assert done.output.startswith("error: ") and message in done.output
    assert done.output.count("\n") == 1
    assert not (folder / "report.html").exists()


def test_a_sweep_folder_is_not_a_run_folder(tmp_path):
    done = run_ok("sweep", "--budget", "128,256", "--out", tmp_path, "--name", "s")
    assert done.exit_code == 0
    done = invoke("report", tmp_path / "sweep-s")
    assert done.exit_code == 2 and "a sweep's folder, not a run's" in done.output


def test_report_of_a_missing_folder(tmp_path):
    done = invoke("report", tmp_path / "nothing")
    assert done.exit_code == 2 and done.output == f"error: {tmp_path / 'nothing'}: no such folder\n"
