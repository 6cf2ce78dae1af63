"""capacity on a workload it cannot scale: one line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

SCENARIO = """\
name: burst
engine: {max_num_batched_tokens: 512, num_blocks: 200}
time: {kind: constant, step_time: 0.01}
workload: {kind: trace, format: kvsched, path: burst.csv}
"""


def write(folder: Path, times: list[float]) -> Path:
    (folder / "burst.csv").write_text("arrival_time,prompt_len,output_len\n" + "".join(
        f"{t},100,10\n" for t in times))
    path = folder / "b.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.mark.parametrize("times", [[5.0] * 20, [0.0]])
def test_a_trace_that_arrives_at_one_instant_has_no_rate(tmp_path, times):
    """It said "inf requests/s" before."""
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["capacity", str(write(tmp_path, times)), "--slo",
                                      "ttft_p99=1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / 'b.yaml'}:4: workload: capacity scales the "
                           f"arrival rate, but the trace's {len(times)} request(s) all arrive "
                           f"at one instant"), line
    assert "inf" not in line
    assert not out.exists()


def test_a_trace_with_a_span_is_searched(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["capacity", str(write(tmp_path, [i * 0.5 for i in
                                                                       range(20)])),
                                      "--slo", "ttft_p99=1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "inf" not in (out / "capacity-burst" / "capacity.csv").read_text()
