"""Records do not depend on how the interpreter's `sum()` adds floats (Python 3.12 made it
compensated): a run whose `sum()` is replaced by a correctly rounded one writes the same bytes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched.floatsum import fold

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
name: sums
seed: 3
engine: {preset: vllm_v1, max_num_batched_tokens: 512, num_blocks: 400}
time: {kind: roofline, model: meta-llama/Llama-3.1-8B, gpu: h100-sxm}
workload:
  kind: synthetic
  num_requests: 120
  arrival: {kind: poisson, rate: 30}
  prompt_len: {kind: lognormal, median: 300, sigma: 0.8, max: 2000}
  output_len: {kind: lognormal, median: 60, sigma: 0.8, max: 400}
  system_prompts: {groups: 3, prefix_len: 64, share: 0.6}
variants:
  - {name: one}
  - {name: fleet, cluster: {replicas: 2, router: least_outstanding}}
  - {name: lesson, engine: {preset: lesson, num_blocks: 200, chunked_prefill: true},
     time: {kind: linear, base: 0.003, per_prefill_token: 0.00001, per_decode: 0.0001}}
"""

# A child process: the run, with `sum()` of floats correctly rounded if asked (math.fsum:
# the most another interpreter's sum() could differ).
RUN = """
import builtins, math, sys
if sys.argv[3] == "fsum":
    plain = builtins.sum
    def rounded(values, start=0):
        values = list(values)
        if any(type(v) is float for v in values) or type(start) is float:
            return math.fsum([start, *values])
        return plain(values, start)
    builtins.sum = rounded
from kvsched.cli import app
app(["run", sys.argv[1], "--out", sys.argv[2], "--records", "full", "--no-check"])
"""


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".csv", ".json") and p.name != "run.json"}


def test_records_do_not_depend_on_the_interpreters_float_sum(tmp_path):
    scenario = tmp_path / "sums.yaml"
    scenario.write_text(SCENARIO)
    outs = {}
    for mode in ("plain", "fsum"):
        out = tmp_path / mode
        done = subprocess.run([sys.executable, "-c", RUN, str(scenario), str(out), mode],
                              cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        outs[mode] = files(out / "sums")
    assert len(outs["plain"]) > 10
    assert outs["plain"] == outs["fsum"]


@settings(max_examples=200)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64)),
       st.floats(allow_nan=False, allow_infinity=False))
def test_fold_adds_left_to_right(values, start):
    total = start
    for value in values:
        total = total + value
    assert fold(values, start) == total or (total != total and fold(values, start) != 0)
