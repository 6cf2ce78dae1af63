"""Bad input: one line on stderr naming file, field and line; exit code 2; nothing written."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsched.cli import app

INLINE = "workload: {kind: inline, requests: [{id: a, prompt_len: 20, output_len: 3}]}\n"
SYNTHETIC = ("workload: {kind: synthetic, num_requests: 5, arrival: {kind: poisson, rate: 1}, "
             "prompt_len: 10, output_len: 3}\n")
TRACE_HEADER = "arrival_time,prompt_len,output_len"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_line(tmp_path: Path, *args: str | Path) -> str:
    """Invoke the CLI with `--out tmp/out`, expect an input error; return its one line."""
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [str(a) for a in args] + ["--out", str(out)])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # the funnel, not an uncaught exception
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))
    return lines[0]


def run_error(tmp_path: Path, text: str, *extra: str) -> tuple[str, Path]:
    """Write `text` as s.yaml, run it, return (the error line, the file's path)."""
    path = write(tmp_path, "s.yaml", text)
    return error_line(tmp_path, "run", path, *extra), path


# -- the file itself ------------------------------------------------------------------


def test_missing_file(tmp_path):
    """A scenario file that does not exist is named as such."""
    line = error_line(tmp_path, "run", tmp_path / "nothere.yaml")
    assert f"{tmp_path / 'nothere.yaml'}: no such file" in line


def test_unreadable_file(tmp_path):
    """A file without read permission: the file named, 'cannot read'."""
    path = write(tmp_path, "s.yaml", "name: s\n" + INLINE)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop reading")
        line = error_line(tmp_path, "run", path)
    finally:
        path.chmod(0o644)
    assert f"{path}: cannot read" in line


@pytest.mark.parametrize("content", [b"name: s\n\xff\xfe\x00bad", None],
                         ids=["not-utf8", "a-directory"])
def test_file_that_cannot_be_read_as_text(tmp_path, content):
    """A file that is not UTF-8 text, or a directory given as a file: 'cannot read'."""
    path = tmp_path / "s.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    line = error_line(tmp_path, "run", path)
    assert f"{path}: cannot read" in line


@pytest.mark.parametrize("text", [
    "name: s\nseed: 1\nengine: {num_blocks: 100]\n" + INLINE,
    "name: s\nseed: 1\n  bad: indent\n" + INLINE,
    "name: s\nseed: 1\n\tengine: {}\n" + INLINE,
], ids=["bracket", "indent", "tab"])
def test_yaml_syntax_error_names_the_line(tmp_path, text):
    """A YAML syntax error: the file, the line it is on, 'YAML syntax error'."""
    line, path = run_error(tmp_path, text)
    assert f"{path}:3: YAML syntax error: " in line


@pytest.mark.parametrize("text, where", [
    ("name: s\nengine: [1, 2]\n" + INLINE, ":2: engine: expected a mapping, got a list"),
    ("name: s\ntime:\n  - steps\n" + INLINE, ":2: time: expected a mapping"),
    ("name: s\nworkload: [a, b]\n", ":2: workload: expected a mapping"),
    ("name: s\n" + INLINE + "variants:\n  - {name: a}\n  - {name: b, engine: [1]}\n",
     ":5: variants[1].engine: expected a mapping, got a list"),
    ("- name: s\n- seed: 1\n", ":1: expected a mapping of scenario fields, got a list"),
], ids=["engine", "time", "workload", "variant-engine", "whole-file"])
def test_list_where_a_mapping_belongs(tmp_path, text, where):
    """A list given where a mapping belongs: the field, its line, 'expected a mapping'."""
    line, path = run_error(tmp_path, text)
    assert f"{path}{where}" in line


def test_empty_file(tmp_path):
    """An empty scenario file says so."""
    line, path = run_error(tmp_path, "")
    assert f"{path}:1: expected a mapping of scenario fields, got an empty file" in line


# -- keys and values ------------------------------------------------------------------


@pytest.mark.parametrize("text, field, suggestion", [
    pytest.param("name: s\npolcy: fcfs\n" + INLINE, ":2: polcy", "policy", id="top"),
    pytest.param("name: s\nengine:\n  max_num_seq: 8\n" + INLINE, ":3: engine.max_num_seq",
                 "max_num_seqs", id="engine"),
    pytest.param("name: s\nworkload: {kind: synthetic, num_requests: 5, duraton: 3, arrival: "
                 "{kind: all_at_once}, prompt_len: 10, output_len: 3}\n",
                 ":2: workload.duraton", "duration", id="workload"),
    pytest.param("name: s\n" + INLINE + "variants:\n  - {name: a}\n  - {name: b, polcy: spf}\n",
                 ":5: variants[1].polcy", "policy", id="variant"),
    pytest.param("name: s\nworkload: {kind: synthetic, num_requests: 5, arival: "
                 "{kind: all_at_once}, prompt_len: 10, output_len: 3}\n",
                 ":2: workload.arival", "arrival",
                 id="workload-required"),
    pytest.param("name: s\n" + INLINE + "expect:\n  - {variant: base, metrc: num_finished, "
                 "op: '>', value: 0}\n", ":4: expect[0].metrc", "metric",
                 id="expect-required"),
])
def test_unknown_key_suggests_the_close_match(tmp_path, text, field, suggestion):
    """An unknown key: its path and line, and 'did you mean' the close match."""
    line, path = run_error(tmp_path, text)
    assert f"{path}{field}: unknown key" in line
    assert f"did you mean '{suggestion}'?" in line


@pytest.mark.parametrize("fragment, field, expected", [
    ("engine: {num_blocks: ten}", "engine.num_blocks", "expected an integer, got 'ten'"),
    ("engine: {num_blocks: 10.5}", "engine.num_blocks", "expected an integer, got 10.5"),
    ("engine: {watermark: '0.5'}", "engine.watermark", "expected a number, got '0.5'"),
    ("engine: {chunked_prefill: 1}", "engine.chunked_prefill", "expected true or false"),
    ("seed: abc", "seed", "expected an integer, got 'abc'"),
    ("name: [a]", "name", "expected a string, got a list"),
    ("description: {a: 1}", "description", "expected a string, got a mapping"),
])
def test_wrong_types(tmp_path, fragment, field, expected):
    """A value of the wrong type: the field, its line, what was expected and what came."""
    text = ("name: s\n" if not fragment.startswith("name") else "") + fragment + "\n" + INLINE
    line, path = run_error(tmp_path, text)
    number = 1 if fragment.startswith("name") else 2
    assert f"{path}:{number}: {field}: {expected}" in line


@pytest.mark.parametrize("fragment, field, bound", [
    ("engine: {num_blocks: 0}", "engine.num_blocks", ">= 1, got 0"),
    ("engine: {block_size: -16}", "engine.block_size", ">= 1, got -16"),
    ("engine: {max_num_batched_tokens: 0}", "engine.max_num_batched_tokens", ">= 1, got 0"),
    ("engine: {max_num_seqs: -1}", "engine.max_num_seqs", ">= 1, got -1"),
    ("engine: {max_steps: 0}", "engine.max_steps", ">= 1, got 0"),
    ("time: {kind: constant, step_time: 0}", "time.step_time", "> 0, got 0"),
    ("workload: {kind: inline, requests: [{prompt_len: 0, output_len: 3}]}",
     "workload.requests[0].prompt_len", ">= 1, got 0"),
    ("workload: {kind: inline, requests: [{prompt_len: 5, output_len: -3}]}",
     "workload.requests[0].output_len", ">= 1, got -3"),
    ("workload: {kind: inline, requests: [{prompt_len: 5, output_len: 3, arrival: -1}]}",
     "workload.requests[0].arrival", ">= 0, got -1"),
    ("workload: {kind: synthetic, num_requests: 0, arrival: {kind: all_at_once}, "
     "prompt_len: 10, output_len: 3}", "workload.num_requests", ">= 1, got 0"),
    ("workload: {kind: synthetic, num_requests: 5, arrival: {kind: poisson, rate: -2}, "
     "prompt_len: 10, output_len: 3}", "workload.arrival.rate", ">= 1e-09, got -2"),
    ("workload: {kind: synthetic, num_requests: 5, arrival: {kind: all_at_once}, "
     "prompt_len: 0, output_len: 3}", "workload.prompt_len.value", ">= 1, got 0"),
])
def test_zero_or_negative_sizes(tmp_path, fragment, field, bound):
    """Sizes, counts and rates must be positive: the field, its line and the bound."""
    workload = "" if fragment.startswith("workload") else INLINE
    line, path = run_error(tmp_path, "name: s\n" + fragment + "\n" + workload)
    assert f"{path}:2: {field}: expected a value {bound}" in line


@pytest.mark.parametrize("value, bound", [("1", "< 1, got 1"), ("1.5", "< 1, got 1.5"),
                                          ("-0.1", ">= 0, got -0.1")])
def test_watermark_outside_zero_one(tmp_path, value, bound):
    """The watermark is a fraction in [0, 1)."""
    line, path = run_error(tmp_path, f"name: s\nengine:\n  watermark: {value}\n" + INLINE)
    assert f"{path}:3: engine.watermark: expected a value {bound}" in line


@pytest.mark.parametrize("policy", ["fifo", "{name: fifo}", "{name: lifo, aging: 1}"])
def test_unknown_policy_lists_the_valid_ones(tmp_path, policy):
    """An unknown policy name: the field, and every built-in policy listed."""
    line, path = run_error(tmp_path, f"name: s\npolicy: {policy}\n" + INLINE)
    assert f"{path}:2: policy" in line
    assert "unknown policy" in line and "fcfs" in line and "spf" in line and "priority" in line


def test_unknown_policy_parameter_suggests_the_close_match(tmp_path):
    """A misspelt policy parameter is refused with the close match."""
    line, path = run_error(tmp_path, "name: s\npolicy: {name: spf, agin: 0.1}\n" + INLINE)
    assert f"{path}:2: policy" in line and "did you mean 'aging'?" in line


def test_unknown_preemption_mode_lists_the_valid_ones(tmp_path):
    """An unknown preemption mode: the field, its line, recompute and swap listed."""
    line, path = run_error(tmp_path, "name: s\nengine:\n  preemption: drop\n" + INLINE)
    assert f"{path}:3: engine.preemption: unknown value 'drop'" in line
    assert "recompute, swap" in line


def test_unknown_workload_kind_lists_the_valid_ones(tmp_path):
    """An unknown `kind` names the kinds there are."""
    line, path = run_error(tmp_path, "name: s\nworkload: {kind: trac, path: t.csv}\n")
    assert f"{path}:2: workload: unknown kind 'trac'" in line
    assert "inline, synthetic, trace" in line


# -- trace files ----------------------------------------------------------------------


def trace_error(tmp_path: Path, body: str, options: str = "format: kvsched",
                name: str = "t.csv") -> tuple[str, Path, Path]:
    """Run a scenario replaying a trace with this content; (error line, scenario, trace)."""
    trace = write(tmp_path / "lab", name, body)
    line, path = run_error(
        tmp_path, f"name: s\nworkload: {{kind: trace, {options}, path: lab/{name}}}\n")
    return line, path, trace


def test_trace_file_missing(tmp_path):
    """A trace path that does not exist: the field and the path it looked for."""
    line, path = run_error(tmp_path, "name: s\nworkload: {kind: trace, format: kvsched, "
                                     "path: gone.csv}\n")
    assert f"{path}:2: workload.path: no such file" in line and "gone.csv" in line


@pytest.mark.parametrize("body, options, missing", [
    ("arrival_time,prompt_len\n0,10\n", "format: kvsched", "output_len"),
    (f"{TRACE_HEADER}\n0,10,5\n", "format: azure", "TIMESTAMP"),
    (f"{TRACE_HEADER}\n0,10,5\n", "format: vidur", "arrived_at"),
    ("t,p,o\n0,5,3\n", "columns: {arrival_time: t, prompt_len: p, output_len: out}", "out"),
], ids=["kvsched", "azure", "vidur", "columns"])
def test_trace_missing_columns(tmp_path, body, options, missing):
    """A trace without a column its format needs: which column, and the ones it has."""
    line, path, trace = trace_error(tmp_path, body, options)
    assert f"{path}:2: workload.path:" in line
    assert f"{trace} has no column '{missing}'; it has:" in line


@pytest.mark.parametrize("body, options, name, problem", [
    (f"{TRACE_HEADER}\n0,10,5\n1,abc,5\n", "format: kvsched", "t.csv",
     "line 3: column 'prompt_len': expected a number, got 'abc'"),
    (f"{TRACE_HEADER}\n0,10,5\n1,10,\n", "format: kvsched", "t.csv",
     "line 3: column 'output_len': expected a number"),
    (f"{TRACE_HEADER}\n0,10.5,5\n", "format: kvsched", "t.csv",
     "line 2: column 'prompt_len': expected a whole number"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
     '{"timestamp": "soon", "input_length": 5, "output_length": 3}\n', "format: mooncake",
     "m.jsonl", "line 2: column 'timestamp': expected a number, got 'soon'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
     "yesterday,396,109\n", "format: azure", "a.csv",
     "line 3: column 'TIMESTAMP': expected a timestamp, got 'yesterday'"),
], ids=["word", "empty-cell", "fraction", "jsonl", "timestamp"])
def test_trace_non_numeric_values(tmp_path, body, options, name, problem):
    """A value that is not a number (or timestamp): the trace's line and column."""
    line, path, trace = trace_error(tmp_path, body, options, name)
    assert f"{path}:2: workload.path: {trace} {problem}" in line


@pytest.mark.parametrize("row, problem", [
    ("-1,10,5", "column 'arrival_time': expected a number >= 0, got '-1'"),
    ("1,10,-5", "column 'output_len': expected a number >= 1, got '-5'"),
    ("1,0,5", "column 'prompt_len': expected a number >= 1, got '0'"),
])
def test_trace_negative_values(tmp_path, row, problem):
    """Negative times and non-positive lengths are refused with the trace's line."""
    line, path, trace = trace_error(tmp_path, f"{TRACE_HEADER}\n0,10,5\n{row}\n")
    assert f"{path}:2: workload.path: {trace} line 3: {problem}" in line


def test_trace_that_is_not_a_table(tmp_path):
    """A trace that cannot be parsed at all: 'cannot parse' and the file."""
    line, path, trace = trace_error(tmp_path, f"{TRACE_HEADER}\n0,10,5\n1,10\n2,10,5,7,9\n")
    assert f"{path}:2: workload.path: cannot parse '{trace}'" in line


def test_duplicate_request_ids_inline(tmp_path):
    """Two inline requests with one id: the second one's path and line."""
    line, path = run_error(tmp_path, """\
        name: s
        workload:
          kind: inline
          requests:
            - {id: a, prompt_len: 20, output_len: 3}
            - {id: a, prompt_len: 30, output_len: 3}
        """)
    assert f"{path}:6: workload.requests[1].id: duplicate request id 'a'" in line


def test_duplicate_request_ids_in_a_trace(tmp_path):
    """Two trace rows with one request_id: the trace line of the second."""
    line, path, trace = trace_error(
        tmp_path, f"{TRACE_HEADER},request_id\n0,10,5,x\n1,10,5,y\n2,10,5,x\n")
    assert (f"{path}:2: workload.path: {trace} line 4: "
            "duplicate request id 'x'") in line


@pytest.mark.parametrize("workload, where", [
    ("{kind: trace, format: kvsched, path: lab/t.csv, start: 100}", "workload: "),
    ("{kind: trace, format: kvsched, path: lab/t.csv, start: 0.1, duration: 0.5}", "workload: "),
    ("{kind: trace, format: kvsched, path: lab/t.csv, start: 0.1, limit: 1, duration: 0.5}",
     "workload: "),
    ("{kind: trace, format: kvsched, path: lab/empty.csv}", "workload: "),
    ("{kind: inline, requests: []}", "workload.requests: expected at least 1"),
    ("{kind: synthetic, num_requests: 3, arrival: {kind: all_at_once}, output_len: 1, "
     "prompt_len: {kind: empirical, path: lab/empty.csv, column: prompt_len}}",
     "workload.prompt_len.path: "),
], ids=["window-after-the-end", "window-between-rows", "window-and-limit", "header-only",
        "inline", "empirical-empty"])
def test_empty_workload(tmp_path, workload, where):
    """A workload with no requests (a window with no rows, an empty list) is an error."""
    write(tmp_path / "lab", "t.csv", f"{TRACE_HEADER}\n0,10,5\n1,10,5\n")
    write(tmp_path / "lab", "empty.csv", f"{TRACE_HEADER}\n")
    line, path = run_error(tmp_path, f"name: s\nworkload: {workload}\n")
    assert f"{path}:2: {where}" in line
    assert any(words in line for words in ("no requests", "at least 1", "is empty"))


# -- variants and expectations --------------------------------------------------------


def test_error_in_a_variant_override_points_at_the_variant_line(tmp_path):
    """A bad override in variants[2]: `variants[2].engine.num_blocks` and its own line."""
    line, path = run_error(tmp_path, """\
        name: s
        engine: {num_blocks: 100}
        workload: {kind: inline, requests: [{prompt_len: 20, output_len: 3}]}
        variants:
          - {name: a}
          - {name: b, engine: {num_blocks: 50}}
          - name: c
            engine:
              num_blocks: 0
        """)
    assert f"{path}:9: variants[2].engine.num_blocks: expected a value >= 1, got 0" in line


def test_error_in_a_variant_workload_file_points_at_the_variant(tmp_path):
    """A variant that points its trace at a bad file: the error names variants[1]."""
    write(tmp_path, "ok.csv", f"{TRACE_HEADER}\n0,10,5\n")
    write(tmp_path, "bad.csv", "arrival_time,prompt_len\n0,10\n")
    line, path = run_error(tmp_path, """\
        name: s
        workload: {kind: trace, format: kvsched, path: ok.csv}
        variants:
          - {name: a}
          - {name: b, workload: {path: bad.csv}}
        """)
    assert (f"{path}:5: variants[1].workload.path: {tmp_path / 'bad.csv'} "
            "has no column 'output_len'") in line


def test_duplicate_variant_names(tmp_path):
    """Two variants with one name: the second one's line."""
    line, path = run_error(tmp_path, "name: s\n" + INLINE + "variants:\n  - {name: a}\n"
                                     "  - {name: a}\n")
    assert f"{path}:5: variants[1].name: duplicate variant name 'a'" in line


@pytest.mark.parametrize("entry, field, problem", [
    ("{variant: bse, metric: num_finished, op: '>', value: 0}", "expect[0].variant",
     "unknown variant 'bse' (did you mean 'base'?)"),
    ("{variant: base, metric: num_finished, ratio_to: other, op: '>', value: 0}",
     "expect[0].ratio_to", "unknown variant 'other'"),
    ("{variant: base, metric: num_finishd, op: '>', value: 0}", "expect[0].metric",
     "unknown metric 'num_finishd' (did you mean 'num_finished'?)"),
    ("{variant: base, metric: num_finished, per: requests, op: '>', value: 0}",
     "expect[0].per", "unknown metric 'requests'"),
    ("{variant: base, metric: num_finished, op: '=>', value: 0}", "expect[0].op",
     "unknown value '=>'"),
])
def test_expectation_with_unknown_names(tmp_path, entry, field, problem):
    """An expectation naming an unknown variant, metric or operator: field, line, valid ones."""
    line, path = run_error(tmp_path, "name: s\n" + INLINE + f"expect:\n  - {entry}\n")
    assert f"{path}:4: {field}: {problem}" in line
    assert "expected one of:" in line


def test_unknown_variant_on_the_command_line(tmp_path):
    """--variant with a name the scenario lacks lists the variants it has."""
    line, path = run_error(tmp_path, "name: s\n" + INLINE + "variants: [{name: a}, {name: b}]\n",
                           "--variant", "c")
    assert f"{path}: --variant: unknown variant 'c'; expected one of: a, b" in line


# -- --set ----------------------------------------------------------------------------


@pytest.mark.parametrize("assignment, field, suggestion", [
    ("engine.num_block=5", "engine.num_block", "num_blocks"),
    ("engin.num_blocks=5", "engin", "engine"),
    ("workload.arival.rate=2", "workload.arival", "arrival"),
    ("polcy=spf", "polcy", "policy"),
])
def test_set_path_that_does_not_exist(tmp_path, assignment, field, suggestion):
    """--set on a path the scenario has no field for: the path and the close match."""
    line, _ = run_error(tmp_path, "name: s\n" + SYNTHETIC, "--set", assignment)
    assert f"--set {field}: unknown key" in line
    assert f"did you mean '{suggestion}'?" in line


def test_set_with_a_bad_value(tmp_path):
    """--set with a value the field refuses: the option, the path, what was expected."""
    line, _ = run_error(tmp_path, "name: s\n" + SYNTHETIC, "--set", "engine.num_blocks=0")
    assert "--set engine.num_blocks: expected a value >= 1, got 0" in line


def test_set_without_equals(tmp_path):
    """--set without KEY=VALUE says what it expected."""
    line, _ = run_error(tmp_path, "name: s\n" + SYNTHETIC, "--set", "engine.num_blocks")
    assert "--set: expected KEY=VALUE, got 'engine.num_blocks'" in line


def test_sweep_set_path_that_does_not_exist(tmp_path):
    """sweep --set KEY=V1,V2 with an unknown key is refused before anything runs."""
    line = error_line(tmp_path, "sweep", "--set", "engine.num_block=60,120")
    assert "engine.num_block: unknown key" in line and "did you mean 'num_blocks'?" in line


# -- sweep ranges ---------------------------------------------------------------------


@pytest.mark.parametrize("option, text, problem", [
    ("--budget", "8192..128", "runs backwards"),
    ("--budget", "abc", "expected A..B, A..B:+S, A..B:xF or a comma list, got 'abc'"),
    ("--budget", "0..8", "a multiplying range must start > 0"),
    ("--budget", "1..8:+0", "the step must be > 0"),
    ("--budget", "1..8:+-2", "the step must be > 0"),
    ("--blocks", "1..8:x1", "the factor must be > 1"),
    ("--blocks", "64,,128", "got '64,,128'"),
    ("--blocks", "..", "got '..'"),
    ("--budget", "1..10000000:+1", "at most"),
], ids=["backwards", "word", "zero-start", "zero-step", "negative-step", "factor-one",
        "empty-item", "no-bounds", "too-many"])
def test_malformed_sweep_ranges(tmp_path, option, text, problem):
    """A malformed range or list: the option, the text, what is wrong."""
    line = error_line(tmp_path, "sweep", option, text)
    assert f"{option}: " in line and problem in line
    assert text in line or problem == "at most"


def test_sweep_with_nothing_to_sweep(tmp_path):
    """sweep without any axis says which options give one."""
    line = error_line(tmp_path, "sweep")
    assert "nothing to sweep" in line and "--budget" in line


def test_sweep_unknown_variant(tmp_path):
    """sweep --variant with an unknown name lists the lesson's variants."""
    line = error_line(tmp_path, "sweep", "--budget", "128", "--variant", "nope")
    assert "--variant: unknown variant 'nope'; expected one of: base" in line


def test_sweep_of_a_bad_scenario_file(tmp_path):
    """sweep names the scenario file's error like run does."""
    path = write(tmp_path, "s.yaml", "name: s\nengine: {num_blocks: 0}\n" + INLINE)
    line = error_line(tmp_path, "sweep", path, "--budget", "128,256")
    assert f"{path}:2: engine.num_blocks: expected a value >= 1, got 0" in line


# -- known bugs: the test states the behaviour the issue asks for ---------------------



def test_sweep_value_invalid_for_its_field_names_the_option(tmp_path):
    """sweep --blocks 0,60: the error names --blocks (what the user typed), not --set."""
    line = error_line(tmp_path, "sweep", "--blocks", "0,60")
    assert "--blocks" in line and "engine.num_blocks: expected a value >= 1, got 0" in line



@pytest.mark.parametrize("where", ["file", "command-line"])
def test_negative_seed(tmp_path, where):
    """A negative seed is refused as a bad value of `seed` (or --seed), not a traceback."""
    seed = "seed: -1\n" if where == "file" else ""
    extra = () if where == "file" else ("--seed", "-1")
    line, path = run_error(tmp_path, "name: s\n" + seed + SYNTHETIC, *extra)
    assert "seed" in line and ">= 0" in line



@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("workload", [
    "{kind: inline, requests: [{prompt_len: 5, output_len: 1, arrival: .inf}]}",
    "{kind: trace, format: kvsched, path: inf.csv}",
    "{kind: trace, format: kvsched, path: ok.csv, time_scale: .inf}",
], ids=["inline-arrival", "trace-arrival", "time-scale"])
def test_infinite_times(tmp_path, workload):
    """An infinite arrival time or time scale is refused with its field, not a traceback."""
    write(tmp_path, "inf.csv", f"{TRACE_HEADER}\n0,10,5\ninf,10,5\n")
    write(tmp_path, "ok.csv", f"{TRACE_HEADER}\n0,10,5\n1,10,5\n")
    line, path = run_error(tmp_path, f"name: s\nworkload: {workload}\n")
    assert f"{path}:2: workload" in line
def test_absurd_request_count(tmp_path):
    """A request count no machine can hold is refused up front, like an absurd duration."""
    line, path = run_error(tmp_path, "name: s\nworkload: {kind: synthetic, num_requests: "
                                     "1000000000000000, arrival: {kind: all_at_once}, "
                                     "prompt_len: 10, output_len: 3}\n")
    assert f"{path}:2: workload.num_requests" in line
@pytest.mark.parametrize("text", [
    'name: "."\n' + INLINE,
    'name: ".."\n' + INLINE,
    "name: s\n" + INLINE + 'variants: [{name: "."}]\n',
    "name: s\n" + INLINE + 'variants: [{name: ".."}]\n',
], ids=["scenario-dot", "scenario-dotdot", "variant-dot", "variant-dotdot"])
def test_names_that_are_path_components(tmp_path, text):
    """A scenario or variant named '.' or '..' is refused; earlier results stay in place."""
    earlier = write(tmp_path / "out" / "other", "summary.csv", "variant\nx\n")
    path = write(tmp_path, "s.yaml", text)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert earlier.is_file(), "the earlier results were moved away"
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and "name" in result.stderr
def test_bad_trace_in_a_later_file_writes_nothing(tmp_path):
    """run a.yaml b.yaml with a bad trace in b: exit 2 and no results for a either."""
    good = write(tmp_path, "a.yaml", "name: a\n" + INLINE)
    write(tmp_path, "bad.csv", "arrival_time,prompt_len\n0,10\n")
    bad = write(tmp_path, "b.yaml", "name: b\nworkload: {kind: trace, format: kvsched, "
                                    "path: bad.csv}\n")
    line = error_line(tmp_path, "run", good, bad)
    assert f"{bad}:2: workload.path" in line
def test_set_error_with_several_files_names_the_file(tmp_path):
    """--set fitting one file but not another: the error names the file it does not fit."""
    synthetic = write(tmp_path, "syn.yaml", "name: syn\n" + SYNTHETIC)
    inline = write(tmp_path, "inl.yaml", "name: inl\n" + INLINE)
    line = error_line(tmp_path, "run", synthetic, inline, "--set", "workload.num_requests=7")
    assert str(inline) in line and "workload.num_requests" in line
def test_lognormal_min_above_max(tmp_path):
    """A lognormal length with min above max is refused like uniform's high < low."""
    line, path = run_error(tmp_path, "name: s\nworkload: {kind: synthetic, num_requests: 5, "
                                     "arrival: {kind: all_at_once}, output_len: 3, prompt_len: "
                                     "{kind: lognormal, median: 100, sigma: 1, min: 50, "
                                     "max: 5}}\n")
    assert f"{path}:2: workload.prompt_len" in line



def test_duplicate_keys(tmp_path):
    """A key given twice (a second `engine:` block) is refused at the second one's line."""
    line, path = run_error(tmp_path, "name: s\nengine: {num_blocks: 0}\n" + INLINE
                           + "engine: {num_blocks: 100}\n")
    assert f"{path}:4: engine" in line and "duplicate" in line


def test_two_files_with_the_same_name(tmp_path):
    """Two scenario files named alike in one run would overwrite each other: refused."""
    first = write(tmp_path, "a.yaml", "name: same\n" + INLINE)
    second = write(tmp_path, "b.yaml", "name: same\n" + INLINE)
    line = error_line(tmp_path, "run", first, second)
    assert str(second) in line and "name 'same'" in line and str(first) in line
