"""A P/D cluster from a scenario file: `never` is today's cluster byte for byte, the new
request columns and summary keys, and bad P/D keys refused in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.records import REQUEST_COLUMNS
from kvsched.records.metrics import PD_KEYS

BASE = """
name: pd
seed: 3
engine: {max_num_batched_tokens: 512, num_blocks: 400, block_size: 16, chunked_prefill: true}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload:
  kind: synthetic
  num_requests: 60
  arrival: {kind: poisson, rate: 20}
  prompt_len: {kind: uniform, low: 20, high: 900}
  output_len: {kind: uniform, low: 5, high: 40}
"""

PD = BASE + """
cluster:
  prefill: {replicas: 2, router: least_outstanding}
  decode: {replicas: 3, router: least_kv, engine: {num_blocks: 300}}
  transfer: {bandwidth_gbps: 100, latency_ms: 0.5, per_request_ms: 1, kv_bytes_per_token: 131072}
  pd_decider: {prompt_over: 100}
"""


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_never_is_todays_cluster_of_the_decode_pool_byte_for_byte(tmp_path):
    never = write(tmp_path, PD.replace("{prompt_over: 100}", "never"), "never.yaml")
    today = write(tmp_path, BASE + """
cluster:
  replicas: [{count: 3, engine: {num_blocks: 300}}]
  router: least_kv
""", "today.yaml")
    for path, out in ((never, "a"), (today, "b")):
        result = invoke("run", path, "--out", tmp_path / out)
        assert result.exit_code == 0, result.output
    for name in ("requests.csv", "steps.csv", "events.csv", "summary.json"):
        assert (tmp_path / "a/pd/base" / name).read_bytes() == \
            (tmp_path / "b/pd/base" / name).read_bytes(), name
    assert (tmp_path / "a/pd/summary.csv").read_bytes() == \
        (tmp_path / "b/pd/summary.csv").read_bytes()


def test_split_run_records_where_each_phase_ran(tmp_path):
    result = invoke("run", write(tmp_path, PD), "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out/pd/base"
    with (folder / "requests.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [*REQUEST_COLUMNS, "replica", "prefill_replica", "decode_replica",
                             "transfer_start", "transfer_time", "transfer_bytes"]
    split = [r for r in rows if int(r["prompt_len"]) > 100]
    whole = [r for r in rows if int(r["prompt_len"]) <= 100]
    assert split and whole
    for r in split:
        assert int(r["prefill_replica"]) in (0, 1) and int(r["decode_replica"]) in (2, 3, 4)
        assert float(r["transfer_bytes"]) == 131072 * int(r["prompt_len"])
        assert float(r["transfer_time"]) >= 0.0015
        assert float(r["first_token_time"]) > float(r["transfer_start"])
    for r in whole:
        assert r["prefill_replica"] == r["decode_replica"] == r["replica"]
        assert int(r["replica"]) >= 2 and r["transfer_time"] == ""
    summary = json.loads((folder / "summary.json").read_text())
    assert [k for k in summary if k in PD_KEYS] == list(PD_KEYS)
    assert summary["num_split"] == summary["num_transferred"] == len(split)
    assert summary["num_prefill_replicas"] == 2 and summary["num_decode_replicas"] == 3
    assert summary["num_finished"] == 60


@pytest.mark.parametrize("cluster, says", [
    ("{prefill: {replicas: 1}, decode: {replicas: 1}}", "transfer: a P/D cluster needs"),
    ("{prefill: {replicas: 1}, transfer: {bandwidth_gbps: 10}}", "decode is missing"),
    ("{replicas: 2, prefill: {replicas: 1}, decode: {replicas: 1}, "
     "transfer: {bandwidth_gbps: 10, kv_bytes_per_token: 1}}", "prefill.replicas and"),
    ("{replicas: 2, transfer: {bandwidth_gbps: 10}}", "only with cluster.prefill"),
    ("{prefill: {replicas: 1, routr: x}, decode: {replicas: 1}, "
     "transfer: {bandwidth_gbps: 10, kv_bytes_per_token: 1}}", "routr"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1}, transfer: {bandwidth_gbps: 10}}",
     "kv_bytes_per_token: needed"),
    ("{prefill: {replicas: 1}, decode: {replicas: 1}, pd_decider: sometimes, "
     "transfer: {bandwidth_gbps: 10, kv_bytes_per_token: 1}}", "pd_decider"),
    ("{prefill: {replicas: 1, router: nope}, decode: {replicas: 1}, "
     "transfer: {bandwidth_gbps: 10, kv_bytes_per_token: 1}}", "unknown router 'nope'"),
])
def test_bad_pd_keys_are_one_line_exit_2(tmp_path, cluster, says):
    path = write(tmp_path, BASE + f"cluster: {cluster}\n")
    result = invoke("run", path, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and str(path) in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_pd_cluster_needs_seconds(tmp_path):
    path = write(tmp_path, BASE.replace(
        "time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}",
        "time: {kind: steps}") + "cluster: {prefill: {replicas: 1}, decode: {replicas: 1}, "
        "transfer: {bandwidth_gbps: 10, kv_bytes_per_token: 1}}\n")
    result = invoke("validate", path)
    assert result.exit_code == 2 and "time model in seconds" in result.output


def test_capacity_searches_a_grid_of_pd_splits_per_gpu(tmp_path):
    """`--set cluster.prefill.replicas=...` and `cluster.decode.replicas=...` make a grid of
    splits; each row counts its GPUs (both pools; the decode pool alone under `never`) and
    its per-GPU goodput is the rate found over them."""
    text = PD.replace("{prompt_over: 100}", "always") + """variants:
  - {name: split}
  - {name: colocated, cluster: {pd_decider: never}}
"""
    path = write(tmp_path, text)
    result = invoke("capacity", path, "--set", "cluster.prefill.replicas=1..2:+1",
                    "--set", "cluster.decode.replicas=1,3", "--slo", "ttft_p99=1",
                    "--tolerance", "0.2", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    with (tmp_path / "capacity-pd" / "capacity.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8
    for row in rows:
        prefill, decode = int(row["cluster.prefill.replicas"]), int(row["cluster.decode.replicas"])
        gpus = decode + (prefill if row["variant"] == "split" else 0)
        assert int(row["num_gpus"]) == gpus
        assert float(row["goodput_per_gpu"]) == pytest.approx(float(row["rate"]) / gpus)
    assert "goodput_per_gpu" in result.output
