"""A cluster run's files: `replica` columns appended, per-replica summary, single runs untouched."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.records import EVENT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name: fleet
seed: 1
engine: {max_num_batched_tokens: 512, num_blocks: 200, block_size: 16}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload:
  kind: synthetic
  num_requests: 40
  arrival: {kind: poisson, rate: 20}
  prompt_len: {kind: uniform, low: 20, high: 200}
  output_len: {kind: uniform, low: 5, high: 40}
{cluster}
variants:
  - {name: a}
"""


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def header(path: Path) -> list[str]:
    with path.open() as handle:
        return next(csv.reader(handle))


def run(tmp_path: Path, cluster: str, *extra: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(SCENARIO.replace("{cluster}", cluster))
    result = invoke("run", path, "--out", tmp_path / "out", *extra)
    assert result.exit_code == 0, result.output
    return tmp_path / "out" / "fleet"


def test_cluster_records_gain_a_replica_column(tmp_path):
    folder = run(tmp_path, "cluster: {replicas: 3, router: least_outstanding}")
    assert header(folder / "a" / "requests.csv") == [*REQUEST_COLUMNS, "replica"]
    assert header(folder / "a" / "steps.csv") == [*STEP_COLUMNS, "replica"]
    assert header(folder / "a" / "events.csv") == [*EVENT_COLUMNS, "replica"]
    with (folder / "a" / "requests.csv").open() as handle:
        replicas = [row["replica"] for row in csv.DictReader(handle)]
    assert len(replicas) == 40 and set(replicas) == {"0", "1", "2"}
    summary = json.loads((folder / "a" / "summary.json").read_text())
    assert summary["num_replicas"] == 3 and len(summary["replicas"]) == 3
    assert "incident_imbalance" in summary
    columns = header(folder / "summary.csv")
    assert "r2_ttft_p99" in columns and "replicas" not in columns


def test_the_replica_column_is_written_as_the_csv_module_writes_it(tmp_path):
    """requests.csv's `replica` goes through the table's C formatter with the other
    columns: the bytes the csv module writes of each record's row and its replica (None, a
    turn that never arrived: an empty cell)."""
    from dataclasses import replace

    from kvsched.cluster.run import write_cluster_records
    from kvsched.records.csvout import write_rows
    from kvsched.records.steplog import RecordMode
    from kvsched.runner import run_variant
    from kvsched.scenario import load_scenario

    path = tmp_path / "fleet.yaml"
    path.write_text(SCENARIO.replace("{cluster}", "cluster: {replicas: 3}"))
    result = run_variant(load_scenario(path).variants[0])
    result = replace(result, replica_of=(None, *result.replica_of[1:]))
    write_cluster_records(tmp_path, result, RecordMode.SUMMARY)  # type: ignore[arg-type]
    expected = tmp_path / "expected.csv"
    write_rows(expected, (*REQUEST_COLUMNS, "replica"),
               [(*r.as_row(), k) for r, k in zip(result.requests, result.replica_of,
                                                 strict=True)])
    assert (tmp_path / "requests.csv").read_bytes() == expected.read_bytes()


def test_compact_and_summary_records_for_a_cluster(tmp_path):
    folder = run(tmp_path, "cluster: {replicas: 2}", "--records", "compact")
    assert header(folder / "a" / "steps.csv")[-1] == "replica"
    assert header(folder / "a" / "steps.csv")[1] == "num_steps"
    folder = run(tmp_path, "cluster: {replicas: 2}", "--records", "summary")
    assert not (folder / "a" / "steps.csv").exists()


def test_single_replica_records_have_no_replica_column(tmp_path):
    folder = run(tmp_path, "")
    assert header(folder / "a" / "requests.csv") == list(REQUEST_COLUMNS)
    assert header(folder / "a" / "steps.csv") == list(STEP_COLUMNS)
    summary = json.loads((folder / "a" / "summary.json").read_text())
    assert "replicas" not in summary and "incident_imbalance" not in summary


def test_bad_cluster_input_is_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(SCENARIO.replace("{cluster}", "cluster: {replicas: 2, router: least_kb}"))
    result = invoke("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "fleet.yaml:" in line and "cluster.router" in line
    assert "did you mean 'least_kv'" in line
    assert not (tmp_path / "out").exists()


def test_routing_scenario_holds_its_checks(tmp_path):
    result = invoke("run", ROOT / "scenarios" / "routing_load.yaml", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output


def summary_of(folder: Path, variant: str = "a") -> dict:
    return json.loads((folder / variant / "summary.json").read_text())


def test_one_session_on_one_replica_is_named_an_imbalance(tmp_path):
    """All requests share a session: the session router piles them on replica 0 while
    replica 1 idles, and the diagnosis says so."""
    requests = "\n".join(f"    - {{arrival: {i * 0.01:.2f}, prompt_len: 100, output_len: 50, "
                         f"session: chat}}" for i in range(30))
    path = tmp_path / "s.yaml"
    path.write_text(f"""
name: sticky
engine: {{max_num_batched_tokens: 512, max_num_seqs: 4, num_blocks: 400}}
time: {{kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}}
workload:
  kind: inline
  requests:
{requests}
cluster: {{replicas: 2, router: session}}
variants:
  - {{name: a}}
  - {{name: spread, cluster: {{router: least_outstanding}}}}
expect:
  - {{variant: a, metric: incident_imbalance, op: "==", value: 1}}
  - {{variant: spread, metric: incident_imbalance, op: "==", value: 0}}
  - {{variant: a, metric: replica_requests_max, op: "==", value: 30}}
""")
    result = invoke("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output
    assert "imbalance: replica 0 had" in result.output and "replica 1 had nothing" in result.output
    summary = summary_of(tmp_path / "out" / "sticky")
    assert summary["max_queue_while_idle"] >= 8


def test_a_slow_replica_behind_round_robin_shows_in_its_p99(tmp_path):
    """A mixed fleet: one replica 20x slower; round-robin feeds it a quarter of the traffic
    anyway, and its p99 TTFT is named as far above the others'."""
    folder = run(tmp_path, """cluster:
  replicas:
    - {count: 3}
    - {time: {kind: linear, base: 0.2, per_prefill_token: 0.002, per_decode: 0.02}}
  router: round_robin""")
    summary = summary_of(folder)
    slow, *fast = summary["replicas"][::-1]
    assert slow["replica"] == 3 and all(slow["ttft_p99"] > 3 * f["ttft_p99"] for f in fast)
    assert summary["incident_imbalance"] == 1
    assert any(i["kind"] == "imbalance" and i["evidence"]["worst_replica"] == 3
               for i in summary["incidents"])


def test_a_mixed_fleet_takes_each_replicas_engine(tmp_path):
    folder = run(tmp_path, """cluster:
  replicas: [{engine: {num_blocks: 50}}, {count: 2, engine: {num_blocks: 300}}]""")
    summary = summary_of(folder)
    assert [r["num_blocks"] for r in summary["replicas"]] == [50, 300, 300]
    with (folder / "a" / "steps.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        total = {"0": 50, "1": 300, "2": 300}[row["replica"]]
        assert int(row["blocks_used"]) + int(row["blocks_free"]) == total


def test_validate_never_imports_a_user_router_and_run_names_it(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(SCENARIO.replace("{cluster}",
                                     "cluster: {replicas: 2, router: no_such_pkg.routers:Mine}"))
    assert invoke("validate", path).exit_code == 0
    result = invoke("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert "cannot import router module 'no_such_pkg.routers'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_plot_draws_a_timeline_per_replica(tmp_path):
    folder = run(tmp_path, "cluster: {replicas: [{engine: {num_blocks: 80}}, {count: 1}]}",
                 "--plot")
    assert (folder / "timeline-a-r0.png").exists() and (folder / "timeline-a-r1.png").exists()
    assert not (folder / "timeline-a.png").exists()
    assert (folder / "ttft.png").exists()


STREAMED = """
name: stream
seed: 4
engine: {max_num_batched_tokens: 512, num_blocks: 120, block_size: 16, max_num_seqs: 8}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload:
  kind: synthetic
  num_requests: 400
  arrival: {kind: poisson, rate: 30}
  prompt_len: {kind: uniform, low: 20, high: 400}
  output_len: {kind: uniform, low: 5, high: 80}
cluster: {replicas: 3, router: round_robin}
variants:
  - {name: a}
  - {name: b, cluster: {replicas: [{count: 1}, {count: 1, engine: {num_blocks: 60}}]}}
"""


def test_a_streamed_cluster_run_writes_the_bytes_of_an_in_memory_one(tmp_path, monkeypatch):
    """`kvsched run` streams each replica's steps and events in chunks (made small here, so
    that every replica hands on many, its first events held in memory and the rest pickled)
    and joins them: the files are byte for byte those written from a run that kept
    everything in memory."""
    import kvsched.cluster.run
    import kvsched.records.steplog
    from kvsched.cluster.run import write_cluster_records
    from kvsched.records.steplog import RecordMode
    from kvsched.runner import run_variant
    from kvsched.scenario import load_scenario

    monkeypatch.setattr(kvsched.records.steplog, "CHUNK", 64)  # replica chunks of 256 segments
    monkeypatch.setattr(kvsched.cluster.run, "EVENTS_HELD", 1000)  # room for a chunk a replica
    path = tmp_path / "stream.yaml"
    path.write_text(STREAMED)
    variants = load_scenario(path).variants
    kept = {v.name: run_variant(v) for v in variants}  # steps and events all kept
    for result in kept.values():
        for replica in result.replicas:  # several chunks of each
            assert len(replica.events) > 256 and len(replica.step_log.kept) > 512
    for mode in RecordMode:
        result = invoke("run", path, "--out", tmp_path / mode.value, "--records", mode.value)
        assert result.exit_code == 0, result.output
        for name, run in kept.items():
            folder = tmp_path / mode.value / "stream" / name
            assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]
            memory = tmp_path / f"memory-{mode.value}-{name}"
            memory.mkdir()
            write_cluster_records(memory, run, mode)  # type: ignore[arg-type]
            for file in ("requests.csv", "steps.csv", "events.csv"):
                if mode is RecordMode.SUMMARY and file == "steps.csv":
                    assert not (folder / file).exists()
                    continue
                assert (folder / file).read_bytes() == (memory / file).read_bytes(), file


TIMES = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.lists(TIMES, max_size=6), max_size=4), min_size=1, max_size=4),
       st.integers(0, 12))
def test_spooled_events_merge_as_heapq_merges_them_in_memory(tmp_path_factory, spools, room):
    """events.csv merges each replica's spooled chunks by (time, replica) as `heapq.merge`
    merges whole streams, though a stream's times may run back and its chunks are read one
    at a time (each replica's `spools` entry: its chunks of event times), whether a spool
    held them in memory or pickled them (`room`: the events it holds before it pickles)."""
    import heapq

    from kvsched.cluster.run import EventSpool, _merge_events

    folder = tmp_path_factory.mktemp("spools")
    parts, streams, sinks = [], [], []
    for k, chunks in enumerate(spools):
        part = folder / f".events-{k}.pickle"
        sink = EventSpool(part, room)
        stream = []
        for chunk in chunks:
            events = [(len(stream) + p, t, f"r{k}", "arrive", "") for p, t in enumerate(chunk)]
            stream.extend(events)
            sink(events)
        sink.close()
        parts.append(part)
        streams.append(stream)
        sinks.append(sink)
    _merge_events(folder / "events.csv", [sink.chunks() for sink in sinks])
    tagged = [[(event[1], k, event) for event in stream] for k, stream in enumerate(streams)]
    expected = [(*event, k) for _, k, event in heapq.merge(*tagged, key=lambda t: (t[0], t[1]))]
    with (folder / "events.csv").open() as handle:
        rows = list(csv.reader(handle))[1:]
    assert rows == [[str(v) if not isinstance(v, float) else f"{v:.10g}" for v in row]
                    for row in expected]
    assert not any(part.exists() for part in parts)
