"""The compiled build of a module and its plain-Python source are one engine: an import takes
the build only while it is fresh, `KVSCHED_PURE=1` takes the source, and both write the same
bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvsched import compiled

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name: builds
seed: 5
engine: {preset: vllm_v1, max_num_batched_tokens: 512, num_blocks: 300}
time: {kind: linear, base: 0.004, per_prefill_token: 0.00002, per_decode: 0.0002}
workload:
  kind: synthetic
  num_requests: 300
  arrival: {kind: poisson, rate: 40}
  prompt_len: {kind: lognormal, median: 200, sigma: 0.9, max: 2000}
  output_len: {kind: lognormal, median: 60, sigma: 0.8, max: 500}
  system_prompts: {groups: 4, prefix_len: 96, share: 0.7}
  sessions: {turns: 3, user_len: 40, think_time: 0.5}
variants:
  - {name: tight}
  - {name: roomy, engine: {num_blocks: 3000}}
  - {name: fleet, cluster: {replicas: 2, router: {name: prefix_aware, margin: 4}}}
  - {name: sglang, engine: {preset: sglang, max_num_batched_tokens: 512, num_blocks: 300}}
"""


def builds(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", "import json; from kvsched import compiled; "
                          "print(json.dumps(compiled.installed()))"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def built() -> list[str]:
    return [name for name, kind in builds(dict(os.environ, KVSCHED_PURE="")).items()
            if kind == "compiled"]


def test_pure_takes_every_source():
    assert set(builds(dict(os.environ, KVSCHED_PURE="1")).values()) == {"source"}


def test_a_build_older_than_its_source_or_types_is_not_taken(tmp_path):
    binary, source, types = tmp_path / "m.so", tmp_path / "m.py", tmp_path / "m.pxd"
    for path in (source, types, binary):
        path.write_text("")
    now = time.time()
    os.utime(source, (now - 20, now - 20))
    os.utime(types, (now - 20, now - 20))
    os.utime(binary, (now - 10, now - 10))
    assert compiled.fresh(binary, (source, types))
    os.utime(types, (now, now))
    assert not compiled.fresh(binary, (source, types))
    assert compiled.fresh(binary, (source, tmp_path / "missing.pxd"))


def run_files(scenario: Path, out: Path, pure: bool) -> dict[str, bytes]:
    env = dict(os.environ, KVSCHED_PURE="1" if pure else "")
    done = subprocess.run([sys.executable, "-m", "kvsched", "run", str(scenario), "--out",
                           str(out), "--records", "full", "--no-check"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    folder = out / "builds"
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".csv", ".json") and p.name != "run.json"}


def test_the_compiled_build_writes_the_sources_bytes(tmp_path):
    names = built()
    if not names:
        pytest.skip("no module is compiled here (no C compiler or Cython at install time)")
    scenario = tmp_path / "builds.yaml"
    scenario.write_text(SCENARIO)
    source = run_files(scenario, tmp_path / "source", pure=True)
    build = run_files(scenario, tmp_path / "build", pure=False)
    assert len(source) > 10
    assert build == source
    for variant in ("tight", "sglang"):
        summary = json.loads(source[f"{variant}/summary.json"])
        assert summary["num_preemptions"] > 0 and summary["prefix_hit_rate"] > 0.1


def test_counts_past_what_the_build_counts_in_64_bits_are_refused(tmp_path):
    """Pools and budgets over the one bound their knob declares (1e9, well inside the build's
    64-bit counts) are refused by the schema (one line naming the field, exit 2) and by the
    engine alike; request lengths over 2**40 by the engine."""
    from typer.testing import CliRunner

    from kvsched.cli import app

    path = tmp_path / "big.yaml"
    path.write_text("name: big\nengine: {num_blocks: 2199023255552}\nworkload: {kind: "
                    "synthetic, num_requests: 2, arrival: {kind: poisson, rate: 1}, "
                    "prompt_len: 10, output_len: 2}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "engine.num_blocks" in result.output and "Traceback" not in result.output
    from kvsched.config import EngineConfig
    from kvsched.request import Request

    with pytest.raises(ValueError, match="num_blocks must be <= 1,000,000,000"):
        EngineConfig(num_blocks=2 ** 40 + 1)
    with pytest.raises(ValueError, match="2\\*\\*40"):
        Request("r", 0.0, 2 ** 40 + 1, 1)


def test_pure_cast_keeps_a_value_of_the_type_and_converts_the_rest():
    """`cython.cast` where Cython is not installed: what Cython's own pure module does for a
    Python type (a StepOutcome read as the tuple it is, not copied)."""
    from kvsched.records import StepOutcome

    row = StepOutcome(*range(23))
    assert compiled.PurePython.cast(tuple, row) is row
    assert compiled.PurePython.cast(tuple, [1, 2]) == (1, 2)
