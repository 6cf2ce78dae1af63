"""Clean CSV traces read without pandas give the requests pandas' reading gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from run_modules import modules_loaded

import kvsched.workload.build as workload
from kvsched.errors import ScenarioError
from kvsched.schema import TraceWorkload
from kvsched.workload.trace_csv import arrival_seconds, read_clean_columns

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
    assert modules_loaded(["run", str(scenario), "--out", str(tmp_path / "out"), "--records",
                           "compact"], ("pandas",)) == []
    assert (tmp_path / "out" / "s" / "base" / "steps.csv").stat().st_size


# -- the C reader (kvsched/_fastcore.c read_csv) against pyarrow's -----------------------

from kvsched import fastcore  # noqa: E402
from kvsched.workload.trace_csv import _arrow_read, _compiled_read  # noqa: E402

needs_c = pytest.mark.skipif(not fastcore.available(), reason="the C extension is not built")
AZURE_NEEDED = {"TIMESTAMP": "datetime", "ContextTokens": "number", "GeneratedTokens": "number"}

# Cells near the edges of the C reader's subset: some in it, some pyarrow reads otherwise
# (floats, dates without times, zones, spaces, leading zeros), some nobody reads.
STAMPS = st.one_of(
    st.datetimes(min_value=__import__("datetime").datetime(1900, 1, 1),
                 max_value=__import__("datetime").datetime(2199, 12, 31)).map(
        lambda d: d.isoformat(sep=" ")),
    st.builds(lambda d, sep, frac: d.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + frac,
              st.datetimes(), st.sampled_from([" ", "T"]),
              st.sampled_from(["", ".5", ".6805900", ".123456789", ".1234567891", "Z",
                               "+01:00", "."])),
    st.sampled_from(["2023-02-29 00:00:00", "2024-02-29 23:59:59", "2023-13-01 00:00:00",
                     "2023-11-16", "2023-11-16 18:15", "2023-11-16 24:00:00",
                     "2023-11-16 18:15:60", " 2023-11-16 18:15:46", "1899-12-31 23:59:59",
                     "", "x"]))
INTS = st.one_of(st.integers(-10 ** 19, 10 ** 19).map(str),
                 st.sampled_from(["007", "0", "-0", "+5", "5.0", "1e3", " 5", "", "NA", "x"]))
OTHER = st.sampled_from(["abc", "", "1", "2.5", "a b", "é", "x\"y", "true"])


CLEAN_STAMPS = st.builds(
    lambda d, sep, digits: d.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    + (f".{d.microsecond:06d}{digits}"[:1 + len(digits)] if digits else ""),
    st.datetimes(min_value=__import__("datetime").datetime(1900, 1, 1),
                 max_value=__import__("datetime").datetime(2199, 12, 31)),
    st.sampled_from([" ", "T"]), st.sampled_from(["", "5", "680590", "6805900", "123456789"]))


@st.composite
def trace_texts(draw):
    """A CSV text shaped like an Azure trace: clean (in the C reader's subset), or with
    some of its parts bent."""
    clean = draw(st.booleans())
    names = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"] + draw(st.sampled_from(
        [[], ["note"]] if clean else [[], ["note"], ["ContextTokens"], [""]]))
    names = [names[i] for i in draw(st.permutations(range(len(names))))]
    stamp = CLEAN_STAMPS if clean else st.one_of(CLEAN_STAMPS, STAMPS)
    number = st.integers(-10 ** 17, 10 ** 17).map(str) if clean else INTS
    other = st.sampled_from(["abc", "", "1", "2.5", "a b"]) if clean else OTHER
    rows = []
    for _ in range(draw(st.integers(1 if clean else 0, 6))):
        cells = {"TIMESTAMP": draw(stamp), "ContextTokens": draw(number),
                 "GeneratedTokens": draw(number), "note": draw(other), "": draw(other)}
        row = [cells[name] for name in names]
        if not clean and draw(st.integers(0, 10)) == 0:
            row = row[:-1] if draw(st.booleans()) else row + ["1"]
        rows.append(",".join(row))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join([",".join(names)] + rows)
    if draw(st.booleans()):
        text += newline
    if not clean and draw(st.integers(0, 10)) == 0:
        text += newline  # a blank line at the end
    return text


@needs_c
@given(trace_texts())
@settings(max_examples=600, deadline=None)
def test_the_c_reader_reads_only_what_pyarrow_reads_to_the_same_integers(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("t") / "t.csv"
    path.write_bytes(text.encode())
    quick = _compiled_read(path, AZURE_NEEDED)
    if quick is None:
        return
    arrow = _arrow_read(path, AZURE_NEEDED)
    assert arrow is not None, text
    assert quick[0] == arrow[0]
    for name in AZURE_NEEDED:
        assert quick[1][name].tobytes() == arrow[1][name].tobytes(), (name, text)


@needs_c
def test_the_c_reader_takes_the_shipped_trace_and_plain_variants(tmp_path):
    quick, arrow = _compiled_read(AZURE_CONV, AZURE_NEEDED), _arrow_read(AZURE_CONV, AZURE_NEEDED)
    assert quick is not None and arrow is not None and len(quick[1]["TIMESTAMP"]) > 19_000
    assert all(quick[1][n].tobytes() == arrow[1][n].tobytes() for n in AZURE_NEEDED)
    path = tmp_path / "t.csv"
    for text in ("GeneratedTokens,TIMESTAMP,note,ContextTokens\r\n"
                 "3,2024-02-29T23:59:59.5,hello world,-12\r\n"
                 "0,1900-01-01 00:00:00,,7",  # no final newline
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,6\n"):
        path.write_text(text, newline="")
        quick, arrow = _compiled_read(path, AZURE_NEEDED), _arrow_read(path, AZURE_NEEDED)
        assert quick is not None and arrow is not None, text
        assert all(quick[1][n].tobytes() == arrow[1][n].tobytes() for n in AZURE_NEEDED)


@needs_c
@pytest.mark.parametrize("text", [
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,\"5\",6\n",  # a quote
    "TIMESTAMP,ContextTokens,GeneratedTokens\n\n2023-11-16 18:15:46,5,6\n",  # a blank line
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,6,7\n",  # a field more
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,05,6\n",  # a leading zero
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 18:15:46,5,6\n",  # no such day
    "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,5\n",  # a column missing
    "TIMESTAMP,ContextTokens,GeneratedTokens\n",  # no row
])
def test_the_c_reader_leaves_the_rest_to_pyarrow(tmp_path, text):
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert _compiled_read(path, AZURE_NEEDED) is None


@needs_c
def test_an_azure_trace_run_imports_neither_pyarrow_nor_pandas(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(  # a pool this roomy never preempts: the compiled loop carries it
        "name: s\nengine: {max_num_batched_tokens: 2048, max_num_seqs: 256, num_blocks: 26312,"
        " watermark: 0, chunked_prefill: true}\ntime: {kind: constant, step_time: 0.01}\n"
        f"workload: {{kind: trace, format: azure, path: {AZURE_CONV}, limit: 300}}\n")
    assert modules_loaded(["run", str(scenario), "--out", str(tmp_path / "out"), "--records",
                           "compact"], ("pyarrow", "pandas")) == []
    assert (tmp_path / "out" / "s" / "base" / "requests.csv").stat().st_size


@needs_c
def test_the_c_reader_leaves_long_lines_and_asks_each_column_once(tmp_path):
    """pyarrow refuses a row longer than its 1 MiB block: such lines are left to it (and
    then to pandas); a column asked for twice is a caller's error."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens,note\n2023-11-16 18:15:46,5,6,"
                     + b"x" * (1 << 17) + b"\n")
    assert _compiled_read(path, AZURE_NEEDED) is None
    with pytest.raises(ValueError, match="twice"):
        fastcore.read_csv(b"a,b\n1,2\n", ("a", "a"), "nn")
