"""`make experiments` (tools/experiments.py): every scenario run with its pictures and
report.html, two at a time, each report printed whole with its files' paths; a failing check
fails the whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAILING = """\
name: failing
engine: {max_num_batched_tokens: 256, num_blocks: 100}
workload: {kind: synthetic, num_requests: 20, arrival: {kind: all_at_once}, prompt_len: 50,
           output_len: 10}
expect:
  - {variant: base, metric: ttft_p99, op: "<", value: 0.001}
"""


def experiments(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "tools" / "experiments.py"),
                           *map(str, args)], capture_output=True, text=True, timeout=600)


def test_reports_are_whole_and_name_every_png(tmp_path):
    done = experiments("--jobs", "2", "--out", tmp_path / "r", REPO / "scenarios" / "lesson.yaml",
                       REPO / "scenarios" / "budget128.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    # a timeline per variant, ttft.png, latency.png, report.html
    names = {"lesson": 4, "budget128": 7}
    block: list[str] = []
    for line in done.stdout.splitlines():
        if not line.startswith("-- "):
            block.append(line)
            continue
        name = Path(line.removeprefix("-- ").split(":")[0]).stem
        assert line.startswith(f"-- {REPO / 'scenarios' / name}.yaml: ok (")
        text = "\n".join(block)
        assert text.strip().startswith(f"== {name}: ")
        wrote = [x.removeprefix("wrote ") for x in block if x.startswith("wrote ")]
        assert len(wrote) == names.pop(name), text
        assert all(Path(path).is_file() and Path(path).parent.name == name for path in wrote)
        assert f"records: {tmp_path / 'r' / name}/" in text
        block = []
    assert not names
    assert done.stdout.strip().splitlines()[-1].startswith("2 scenarios in ")
    assert "kvsched run: " not in done.stdout  # the heartbeat is not part of a report


def test_a_failing_check_fails_the_whole(tmp_path):
    (tmp_path / "failing.yaml").write_text(FAILING)
    done = experiments("--out", tmp_path / "r", tmp_path / "failing.yaml",
                       REPO / "scenarios" / "lesson.yaml")
    assert done.returncode == 1
    assert "-- " + str(tmp_path / "failing.yaml") + ": exit 1" in done.stdout
    assert done.stdout.strip().splitlines()[-1].endswith(f"failed: {tmp_path / 'failing.yaml'}")


def test_the_makefile_runs_it():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "tools/experiments.py --jobs $(JOBS) --out $(OUT) scenarios/*.yaml" in makefile
