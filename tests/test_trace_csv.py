"""Clean CSV traces read without pandas give the requests pandas' reading gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsched.workload as workload
from kvsched.errors import ScenarioError
from kvsched.schema import TraceWorkload
from kvsched.trace_csv import arrival_seconds, read_clean_columns

REPO = Path(__file__).resolve().parent.parent
AZURE_CONV = REPO / "scenarios" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def both_readers(spec: dict, monkeypatch, seed: int = 0):
    """(requests, whether pyarrow read it) with the fast reader, then pandas' requests."""
    spec_model = TraceWorkload.model_validate({"kind": "trace", **spec})
    used = []
    def spy(*args, **kwargs):
        columns = read_clean_columns(*args, **kwargs)
        used.append(columns is not None)
        return columns

    monkeypatch.setattr(workload, "read_clean_columns", spy)
    quick = workload.build_requests(spec_model, seed)
    monkeypatch.setattr(workload, "read_clean_columns", lambda *args, **kwargs: None)
    slow = workload.build_requests(spec_model, seed)
    return quick, used == [True], slow


@given(st.lists(st.integers(0, 2 ** 53), min_size=1, max_size=50))
@settings(max_examples=200, deadline=None)
def test_arrival_seconds_are_pandas_total_seconds(stamps):
    ns = np.array(stamps, dtype=np.int64)
    expected = (pd.Series(ns.astype("datetime64[ns]")) - pd.Series(
        ns.astype("datetime64[ns]")).min()).dt.total_seconds().to_numpy()
    assert arrival_seconds(ns).tobytes() == np.asarray(expected, dtype=float).tobytes()


@pytest.mark.parametrize("extra", [{}, {"start": 100, "duration": 600, "time_scale": 0.5,
                                        "limit": 3000}])
def test_azure_trace_is_read_without_pandas_to_the_same_requests(monkeypatch, extra):
    quick, fast, slow = both_readers({"format": "azure", "path": str(AZURE_CONV), **extra},
                                     monkeypatch)
    assert fast
    assert quick == slow and len(quick) > 1000


def test_integer_times_and_lengths_only_files_read_fast(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n3,7,8\n")
    quick, fast, slow = both_readers({"format": "vidur", "path": str(path)}, monkeypatch)
    assert fast and quick == slow and [r.arrival_time for r in quick] == [0.0, 3.0]
    quick, fast, slow = both_readers({"format": "lengths", "path": str(path), "arrival": {
        "kind": "poisson", "rate": 2}}, monkeypatch, seed=4)
    assert fast and quick == slow


@pytest.mark.parametrize("text", [
    "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,5,6\n3,7,8\n",  # float times
    "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,6\n3,,8\n",  # an empty cell
    "arrived_at,num_prefill_tokens,num_prefill_tokens\n0,5,6\n3,7,8\n",  # a duplicate name
    "arrival_time,prompt_len,output_len,priority\n0,5,6,1\n3,7,8,0\n",  # an extra column
])
def test_files_that_are_not_plainly_clean_go_to_pandas(tmp_path, monkeypatch, text):
    path = tmp_path / "t.csv"
    path.write_text(text)
    fmt = "kvsched" if text.startswith("arrival_time") else "vidur"
    try:
        quick, fast, slow = both_readers({"format": fmt, "path": str(path)}, monkeypatch)
    except ScenarioError:
        return  # pandas' reading refused it, naming the row (tests/test_workload.py)
    assert not fast and quick == slow


def test_zone_aware_and_out_of_range_values_go_to_pandas(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16T18:15:46Z,5,6\n2023-11-16T18:15:47Z,7,8\n")
    quick, fast, slow = both_readers({"format": "azure", "path": str(path)}, monkeypatch)
    assert not fast and quick == slow
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,6\n")
    with pytest.raises(ScenarioError, match="line 2: column 'ContextTokens'"):
        both_readers({"format": "azure", "path": str(path)}, monkeypatch)


def test_a_trace_run_with_compact_records_never_imports_pandas(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{k:02d}.5,{40 + k},{3 + k % 4}\n" for k in range(40)))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ntime: {kind: constant, step_time: 0.01}\nworkload: {kind: "
                        f"trace, format: azure, path: {trace}}}\n")
    code = ("import sys; from kvsched.cli import main\n"
            f"sys.argv = ['kvsched', 'run', {str(scenario)!r}, '--out', "
            f"{str(tmp_path / 'out')!r}, '--records', 'compact']\n"
            "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code\n"
            "assert 'pandas' not in sys.modules, 'pandas was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "s" / "base" / "steps.csv").stat().st_size
