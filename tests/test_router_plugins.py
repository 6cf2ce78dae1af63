"""A user's router module: found beside the scenario as a policy module is, never imported by
`validate`, and one line (exit 2, nothing written) when importing it raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

SCENARIO = """\
name: fleet
seed: 1
engine: {max_num_batched_tokens: 512, num_blocks: 200}
time: {kind: linear, base: 0.01, per_prefill_token: 0.0001, per_decode: 0.001}
workload: {kind: synthetic, num_requests: 30, arrival: {kind: poisson, rate: 20},
           prompt_len: {kind: uniform, low: 20, high: 200}, output_len: 10}
cluster: {replicas: 3, router: MODULE:Last}
"""

LAST = """\
class Last:
    def route(self, request, replicas):
        return len(replicas) - 1
"""


def setup(folder: Path, module: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(source)
    path = folder / "fleet.yaml"
    path.write_text(SCENARIO.replace("MODULE", module))
    return path


def test_a_router_beside_the_scenario_is_found(tmp_path, monkeypatch):
    """Run from another folder: the module is found in the scenario's, and routes."""
    path = setup(tmp_path / "lab", "kvs_last_router", LAST)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "fleet" / "base" / "summary.json").read_text())
    assert [r["num_finished"] for r in summary["replicas"]] == [0, 0, 30]


@pytest.mark.parametrize(("source", "error"), [
    ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ("import no_such_dependency_kvs\n", "ModuleNotFoundError: No module named"),
    ("def broken(:\n", "SyntaxError"),
])
def test_a_router_that_raises_on_import_is_one_line(tmp_path, source, error):
    path = setup(tmp_path, "kvs_bad_router_" + str(abs(hash(source)) % 1000), source)
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0  # never imported
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "cluster.router: cannot import router module 'kvs_bad_router_" in lines[0]
    assert error in lines[0]
    assert not (tmp_path / "out").exists()
