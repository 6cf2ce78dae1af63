"""Clean JSON-lines traces read without pandas give the columns and requests pandas' reading
gives; anything else goes to pandas, with its errors."""

from __future__ import annotations

import json
import math
import tempfile
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
from kvsched.workload import FORMATS
from kvsched.workload.trace_jsonl import read_clean_lines

NEEDED = {"timestamp": (0.0, 1e300), "input_length": (1.0, 1e7), "output_length": (1.0, 1e7)}


def pandas_columns(path: Path, cells: list[str]) -> tuple[dict, dict]:
    """What the pandas path reads of the file: its number columns as `_numbers` turns them
    into floats, its cells as `_hash_prefixes` gets them."""
    table = pd.read_json(path, lines=True, dtype=False)
    numbers = {name: pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float)
               for name in NEEDED}
    return numbers, {name: table[name].tolist() for name in cells if name in table.columns}


def same_value(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 is not 1.0 nor True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same_value, a, b))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)  # type: ignore[index]
    return a == b


def agrees_with_pandas(path: Path) -> bool:
    """The reader's columns are pandas' (when it reads the file: returns whether it did); a
    file pandas cannot read, it never reads."""
    read = read_clean_lines(path, NEEDED, ["hash_ids"], ["priority"])
    try:
        numbers, cells = pandas_columns(path, ["hash_ids"])
    except (ValueError, TypeError, KeyError):
        assert read is None
        return False
    if read is None:
        return False
    mine, my_cells = read
    assert {name: values.tobytes() for name, values in mine.items()} == {
        name: values.tobytes() for name, values in numbers.items()}
    assert list(my_cells) == list(cells) and all(
        same_value(my_cells[name], cells[name]) for name in cells)
    return True


def write_rows(folder: Path, rows: list[dict], *, compact: bool = False, ending: str = "\n",
               blank: bool = False) -> Path:
    separators = (",", ":") if compact else (", ", ": ")
    lines = [json.dumps(row, separators=separators, ensure_ascii=False) for row in rows]
    if blank:
        lines = ["", *lines, "   ", ""]
    path = folder / "t.jsonl"
    path.write_text(ending.join(lines) + ending, encoding="utf-8")
    return path


# what a clean file may hold beside the columns read: plain text (no backslash, no colon)
plain_text = st.text(st.characters(min_codepoint=32, exclude_characters='\\:"'), max_size=8)
extra_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 64 - 1) | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", "id"]), inner, max_size=2), max_leaves=6)


@st.composite
def clean_rows(draw) -> list[dict]:
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        row = {"timestamp": draw(st.integers(0, 2 ** 62)),
               "input_length": draw(st.integers(1, 10_000_000)),
               "output_length": draw(st.integers(1, 10_000_000)),
               "hash_ids": draw(st.lists(st.integers(0, 2 ** 56 - 1), max_size=6))}
        row.update(draw(st.dictionaries(st.sampled_from(["session", "text", "x", "tokens"]),
                                        extra_value, max_size=3)))
        keys = draw(st.permutations(list(row)))
        rows.append({key: row[key] for key in keys})
    return rows


@given(clean_rows(), st.booleans(), st.sampled_from(["\n", "\r\n"]), st.booleans())
@settings(max_examples=300, deadline=None)
def test_clean_traces_read_as_pandas_reads_them(rows, compact, ending, blank):
    with tempfile.TemporaryDirectory() as folder:
        path = write_rows(Path(folder), rows, compact=compact, ending=ending, blank=blank)
        assert agrees_with_pandas(path)


# what JSON holds, mostly plainly
EDGES = [2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63, -2 ** 63 - 1, 10 ** 30]
wild_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.sampled_from(EDGES)
    | st.floats() | st.sampled_from([1e19, 1.5e-5, 2.2250738585072014e-308]) | plain_text
    | st.text(max_size=4), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["a", "b", "id"]) | st.text(max_size=3), inner, max_size=2),
    max_leaves=4)


def mostly(usual, *odd):
    """`usual` nine times in ten, else one of `odd`."""
    return st.integers(0, 9).flatmap(lambda k: usual if k else st.one_of(*odd))


@st.composite
def wild_lines(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        row = {"timestamp": draw(mostly(st.integers(0, 9), st.integers(0, 2 ** 64),
                                        st.floats(0, 1e6))),
               "input_length": draw(mostly(st.integers(1, 20), st.integers(-2, 0),
                                           st.booleans(), st.none())),
               "output_length": draw(st.integers(1, 5)),
               "hash_ids": draw(mostly(st.lists(st.integers(0, 9), max_size=3),
                                       st.lists(st.integers(-1, 2 ** 65), max_size=3),
                                       wild_value))}
        row.update(draw(st.dictionaries(mostly(st.sampled_from(["x", "session"]),
                                               st.text(max_size=4)), wild_value, max_size=2)))
        if draw(st.integers(0, 19)) == 0:
            del row[draw(st.sampled_from(list(row)))]
        line = json.dumps(row, ensure_ascii=False)
        if draw(st.integers(0, 4)) == 0:  # a duplicate key, an odd number, a broken line...
            line = line[:-1] + draw(st.sampled_from([
                ', "x": 1}', ', "x": 18446744073709551616, "x": 0}', ', "timestamp": 5}',
                ', "y": 123456789012345678901.5}', ', "z": NaN}', ', "z": -Infinity}',
                ', "z": 01}', ', "z": 1.}', ',}', '}}', '} {"timestamp": 1}', ', "s": "a:b"}',
                ', "s": "\\ud800"}', ', "s": "\t"}', ', "n": ' + "[" * 40 + "]" * 40 + "}"]))
        lines.append(line)
    return "\n".join(lines) + "\n"


@given(wild_lines())
@settings(max_examples=400, deadline=None)
def test_any_trace_reads_as_pandas_reads_it_or_goes_to_pandas(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.jsonl"
        path.write_text(text, encoding="utf-8")
        agrees_with_pandas(path)


@pytest.mark.parametrize("depth", [900, 1000, 1030])
def test_deep_nesting_reads_as_pandas_reads_it(tmp_path, depth):
    """Python's json stops nesting before ujson does (about 990 against 1024 levels)."""
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [], "n": '
        + "[" * depth + "]" * depth + "}\n")
    assert agrees_with_pandas(tmp_path / "t.jsonl") == (depth == 900)


@pytest.mark.parametrize(("tail", "clean"), [
    ("", True),
    (', "x": 18446744073709551615', True),  # the largest whole number ujson reads
    (', "x": 18446744073709551616', False),  # ujson refuses it: pandas names the file
    (', "x": -9223372036854775809', False),
    (', "x": 123456789012345678.5', True),
    (', "x": 1234567890123456789.5', False),  # a whole part past 18 digits
    (', "x": 1.5e-5', True),  # ujson reads 1.5000000000000002e-05: not a column read
    (', "x": NaN', True),  # ujson reads None: not a column read
    (', "x": 18446744073709551616, "x": 0', False),  # a duplicate key hides what ujson refuses
    (', "x": "12:30"', False),  # a colon inside a string
    (', "x": "caf\\u00e9"', False),  # an escape
    (', "priority": 1', False),  # a key whose reading needs pandas
])
def test_edge_cases(tmp_path, tail, clean):
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [1, 2]' + tail
        + "}\n")
    assert agrees_with_pandas(tmp_path / "t.jsonl") == clean


def both_readers(spec: dict, monkeypatch) -> tuple[object, bool, object]:
    """(requests or error, whether the clean path read it) with the clean reader, then
    pandas' requests or error."""
    model = TraceWorkload.model_validate({"kind": "trace", **spec})
    used = []
    replay = workload._replay  # noqa: SLF001

    def spy(*args, **kwargs):
        used.append(True)
        return replay(*args, **kwargs)

    def build() -> object:
        try:
            return workload.build_requests(model)
        except ScenarioError as error:
            return str(error)

    monkeypatch.setattr(workload, "_replay", spy)
    quick = build()
    monkeypatch.setattr(workload, "read_clean_lines", lambda *args, **kwargs: None)
    slow = build()
    return quick, used == [True], slow


def mooncake_rows(rng: np.random.Generator, n: int) -> list[dict]:
    rows, next_id = [], 0
    for k in range(n):
        prompt = int(rng.integers(1, 3000))
        need = math.ceil(prompt / 512)
        ids = [int(b) for b in rng.integers(0, max(next_id, 1), need)]
        ids[-1], next_id = next_id, next_id + 1
        rows.append({"timestamp": 700 * k, "input_length": prompt,
                     "output_length": int(rng.integers(1, 50)), "hash_ids": ids})
    return rows


@pytest.mark.parametrize("extra", [{}, {"start": 2, "duration": 10, "time_scale": 0.5,
                                        "limit": 9}])
def test_mooncake_trace_is_read_without_pandas_to_the_same_requests(tmp_path, monkeypatch,
                                                                     extra):
    path = write_rows(tmp_path, mooncake_rows(np.random.default_rng(3), 40))
    quick, clean, slow = both_readers({"format": "mooncake", "path": str(path), **extra},
                                      monkeypatch)
    assert clean and isinstance(quick, list) and quick == slow
    assert all(request.prefix is not None for request in quick)


def test_the_shipped_mooncake_trace_reads_clean(monkeypatch):
    path = Path(__file__).resolve().parent.parent / "scenarios" / "traces" / (
        "mooncake_conversation_trace.jsonl")
    quick, clean, slow = both_readers({"format": "mooncake", "path": str(path)}, monkeypatch)
    assert clean and quick == slow and len(quick) == 12_031  # type: ignore[arg-type]


@pytest.mark.parametrize(("fmt", "rows"), [
    ("vidur", [{"arrived_at": 0, "num_prefill_tokens": 5, "num_decode_tokens": 6},
               {"num_decode_tokens": 8, "arrived_at": 3, "num_prefill_tokens": 7}]),
    ("kvsched", [{"arrival_time": 0, "prompt_len": 5, "output_len": 6, "hash_ids": []},
                 {"arrival_time": 1, "prompt_len": 9, "output_len": 6, "hash_ids": None},
                 {"arrival_time": 2, "prompt_len": 9, "output_len": 6, "hash_ids": [4]}]),
])
def test_other_formats_read_clean_to_the_same_requests(tmp_path, monkeypatch, fmt, rows):
    path = write_rows(tmp_path, rows)
    quick, clean, slow = both_readers({"format": fmt, "path": str(path)}, monkeypatch)
    assert clean and quick == slow


@pytest.mark.parametrize("lines", [
    ['{"timestamp": 0.5, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}'],
    ['{"timestamp": 0, "output_length": 2, "hash_ids": [0]}'],  # a missing key
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}',
     "[1, 2]"],  # a line that is no object
    ['{"timestamp": 0, "input_length": true, "output_length": 2, "hash_ids": [0]}'],
    ['{"timestamp": 0, "input_length": null, "output_length": 2, "hash_ids": [0]}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0]}'],  # too few
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1.0]}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, -1]}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": "0 1"}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}'],
    ['{"timestamp": -1, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, '
     '18446744073709551616]}'],
    ['{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1], '
     '"note": "caf\\u00e9"}'],
    ["", "  "],  # no rows
])
def test_files_that_are_not_clean_go_to_pandas(tmp_path, monkeypatch, lines):
    """Same requests or the same one-line error as pandas' reading gives."""
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    quick, clean, slow = both_readers({"format": "mooncake", "path": str(path)}, monkeypatch)
    assert not clean and quick == slow


def test_errors_name_the_line_as_before(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0, 1]}\n'
    path.write_text(good * 3 + good.replace("[0, 1]", "[0]"))
    quick, clean, slow = both_readers({"format": "mooncake", "path": str(path)}, monkeypatch)
    assert quick == slow == (f"workload: workload.path: {path} line 4: column 'hash_ids': expected "
                             "ceil(600 / 512) = 2 block ids (hash_block_tokens 512), got 1")


@pytest.mark.parametrize("name", sorted(name for name, layout in FORMATS.items()
                                        if layout.reader is None))
def test_pandas_keeps_each_formats_column_names(tmp_path, name):
    """pandas' reading turns the column names into numbers or dates when every one of them
    reads as one: never for the formats' own, which the clean reader looks up as they are."""
    layout = FORMATS[name]
    keys = [key for key in (layout.arrival_time, layout.prompt_len, layout.output_len)
            if key is not None]
    (tmp_path / "t.jsonl").write_text(json.dumps(dict.fromkeys(keys, 1)) + "\n")
    assert list(pd.read_json(tmp_path / "t.jsonl", lines=True, dtype=False).columns) == keys


def test_a_mooncake_run_with_prefix_caching_never_imports_pandas(tmp_path):
    trace = write_rows(tmp_path, mooncake_rows(np.random.default_rng(5), 30))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nengine: {preset: vllm_v1, num_blocks: 4000, max_num_batched_tokens: 2048, "
        "enable_prefix_caching: true}\ntime: {kind: constant, step_time: 0.01}\n"
        f"workload: {{kind: trace, format: mooncake, path: {trace}}}\n")
    assert modules_loaded(["run", str(scenario), "--out", str(tmp_path / "out"), "--records",
                           "compact"], ("pandas",)) == []
    assert (tmp_path / "out" / "s" / "base" / "steps.csv").stat().st_size
