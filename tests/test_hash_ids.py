"""Block ids (`hash_ids`) beyond Mooncake: in kvsched CSV traces, `columns:` mappings and
inline requests, so that a group can share only part of another's prefix (a system prompt,
then one of several few-shot blocks); `prefix_len: 0` as "no shared prefix"; and what the
prefix caches make of the ids, through `kvsched run`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_workload import requests_for, write_csv
from test_workload_prefix import validate_error
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.prefix import Blocks, common_prefix
from kvsched.runner import run_variant
from kvsched.scenario import load_scenario
from kvsched.workload import TAG_SHIFT, TRACE_BLOCK

HEADER = "arrival_time,prompt_len,output_len,hash_ids"


def segments(request) -> list[tuple[int, int]]:
    """(block id, tokens) of each segment, the tag checked off."""
    assert request.prefix is not None
    assert {seg_id >> TAG_SHIFT for seg_id, _ in request.prefix.segments} == {TRACE_BLOCK}
    return [(seg_id & ((1 << TAG_SHIFT) - 1), n) for seg_id, n in request.prefix.segments]


# -- reading --------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ['"[1, 2, 3]"', "[1 2 3]", "1 2 3", "1;2;3", "1; 2; 3",
                                  '"1,2,3"', '"[1,2,3]"'],
                         ids=["json", "bracketed-spaces", "spaces", "semicolons",
                              "semicolons-spaced", "commas", "json-tight"])
def test_csv_hash_ids_in_every_written_form(tmp_path, cell):
    """The Mooncake JSON list, space-, semicolon- or comma-separated: the same blocks."""
    path = write_csv(tmp_path / "t.csv", HEADER, f"0,1100,5,{cell}")
    (request,) = requests_for(tmp_path, {"kind": "trace", "format": "kvsched",
                                         "path": str(path)})
    assert segments(request) == [(1, 512), (2, 512), (3, 76)]


def test_fewer_ids_than_blocks_leave_the_rest_of_the_prompt_unshared(tmp_path):
    """Ids cover the prompt's first blocks; the rest is the request's own. An empty cell or
    `[]` is no shared prefix. A single id reads as a one-block list."""
    path = write_csv(tmp_path / "t.csv", HEADER, "0,1100,5,1 2", "1,1100,5,7", "2,1100,5,",
                     "3,1100,5,[]", "4,1024,5,1 2")
    a, b, c, d, e = requests_for(tmp_path, {"kind": "trace", "format": "kvsched",
                                            "path": str(path)})
    assert segments(a) == [(1, 512), (2, 512)] and a.prefix.num_tokens == 1024
    assert segments(b) == [(7, 512)]
    assert c.prefix is None and d.prefix is None
    assert segments(e) == [(1, 512), (2, 512)]  # the whole prompt, both blocks full
    assert common_prefix(a.prefix.segments, e.prefix.segments) == 1024


def test_partial_sharing_a_system_prompt_then_few_shot_blocks(tmp_path):
    """The case groups cannot write: all share block 0 (the system prompt); two of three
    also share a few-shot block."""
    path = write_csv(tmp_path / "t.csv", HEADER, "0,300,5,0 10 100", "1,300,5,0 10 101",
                     "2,300,5,0 20 102")
    a, b, c = requests_for(tmp_path, {"kind": "trace", "format": "kvsched", "path": str(path),
                                      "hash_block_tokens": 100})
    assert common_prefix(a.prefix.segments, b.prefix.segments) == 200
    assert common_prefix(a.prefix.segments, c.prefix.segments) == 100
    assert common_prefix(b.prefix.segments, c.prefix.segments) == 100


def test_columns_mapping_reads_hash_ids_from_a_csv(tmp_path):
    path = write_csv(tmp_path / "t.csv", "t,n,out,blocks", '0,1100,5,"[4, 5, 6]"',
                     "1,600,5,4;5")
    a, b = requests_for(tmp_path, {"kind": "trace", "path": str(path), "columns": {
        "arrival_time": "t", "prompt_len": "n", "output_len": "out", "hash_ids": "blocks"}})
    assert segments(a) == [(4, 512), (5, 512), (6, 76)]
    assert segments(b) == [(4, 512), (5, 88)]


def test_kvsched_jsonl_trace_takes_hash_ids_as_json_lists(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"arrival_time": 0, "prompt_len": 40, "output_len": 2, "hash_ids": [3, 4]},
        {"arrival_time": 1, "prompt_len": 40, "output_len": 2}]), encoding="utf-8")
    a, b = requests_for(tmp_path, {"kind": "trace", "format": "kvsched", "path": str(path),
                                   "hash_block_tokens": 16})
    assert segments(a) == [(3, 16), (4, 16)] and b.prefix is None


def test_rows_may_mix_block_ids_and_groups(tmp_path):
    """One file, each row its own kind of prefix: ids and groups never collide."""
    path = write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,hash_ids,"
                     "prefix_group,prefix_len", "0,100,5,0 1,,0", "1,100,5,,sys,40",
                     "2,100,5,,,")
    a, b, c = requests_for(tmp_path, {"kind": "trace", "format": "kvsched", "path": str(path),
                                      "hash_block_tokens": 16})
    assert segments(a) == [(0, 16), (1, 16)]
    assert b.prefix.num_tokens == 40 and c.prefix is None
    assert common_prefix(a.prefix.segments, b.prefix.segments) == 0


def test_inline_hash_ids(tmp_path):
    a, b, c = requests_for(tmp_path, {"kind": "inline", "hash_block_tokens": 512, "requests": [
        {"prompt_len": 1025, "output_len": 8, "hash_ids": [1, 2, 7]},
        {"prompt_len": 1100, "output_len": 8, "hash_ids": [1, 2, 7]},
        {"prompt_len": 1100, "output_len": 8, "hash_ids": []}]})
    assert segments(a) == [(1, 512), (2, 512), (7, 1)]  # the last id cut to the prompt
    assert segments(b) == [(1, 512), (2, 512), (7, 76)]
    assert common_prefix(a.prefix.segments, b.prefix.segments) == 1025
    assert c.prefix is None


def test_inline_ids_default_to_512_tokens(tmp_path):
    (request,) = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"prompt_len": 1100, "output_len": 8, "hash_ids": [1, 2]}]})
    assert segments(request) == [(1, 512), (2, 512)]


def test_one_segment_per_distinct_full_block_and_a_bad_id_named():
    """A full block's segment is one tuple, shared by every prefix that holds it; a last
    block cut to the prompt is its own; an id that is no whole number 0..max is named."""
    base = TRACE_BLOCK << TAG_SHIFT
    blocks = Blocks(4, base, (1 << TAG_SHIFT) - 1)
    cut, whole, again = blocks.prefix([7, 8], 6), blocks.prefix([7, 8], 8), blocks.prefix([8], 4)
    assert cut.segments == ((base | 7, 4), (base | 8, 2))
    assert whole.segments == ((base | 7, 4), (base | 8, 4))
    assert cut.segments[0] is whole.segments[0] and again.segments[0] is whole.segments[1]
    assert blocks.prefix([], 5) is None
    for bad in (True, 1.0, -1, 1 << TAG_SHIFT, 2 ** 64, "x"):
        with pytest.raises(ValueError) as error:
            blocks.prefix([1, bad], 8)
        assert error.value.args == (bad,) and type(error.value.args[0]) is type(bad)


# -- prefix_len 0: no shared prefix ---------------------------------------------------


def test_a_dataframe_written_with_zeros_and_empty_groups(tmp_path):
    """`to_csv` of a frame where rows without a group have prefix_len 0 and group ''."""
    frame = pd.DataFrame({"arrival_time": [0, 1, 2], "prompt_len": [100, 100, 100],
                          "output_len": [5, 5, 5], "prefix_group": ["sys", "", ""],
                          "prefix_len": [40, 0, 0]})
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    a, b, c = requests_for(tmp_path, {"kind": "trace", "format": "kvsched", "path": str(path)})
    assert a.prefix is not None and a.prefix.num_tokens == 40
    assert b.prefix is None and c.prefix is None


def test_prefix_len_zero_alone_is_no_prefix(tmp_path):
    path = write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,prefix_len",
                     "0,100,5,0", "1,100,5,0")
    a, b = requests_for(tmp_path, {"kind": "trace", "format": "kvsched", "path": str(path)})
    assert a.prefix is None and b.prefix is None


def test_inline_prefix_len_zero_with_no_or_an_empty_group(tmp_path):
    requests = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"prompt_len": 50, "output_len": 2, "prefix_group": "", "prefix_len": 0},
        {"prompt_len": 50, "output_len": 2, "prefix_len": 0},
        {"prompt_len": 50, "output_len": 2, "prefix_group": "", "hash_ids": [1]},
        {"prompt_len": 50, "output_len": 2, "prefix_group": "g", "prefix_len": 30}]})
    assert [r.prefix is None for r in requests] == [True, True, False, False]


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("cell, problem", [
    ("1 2 3 4", "line 2: column 'hash_ids': 4 block ids are more than a 1100-token prompt "
                "holds: at most ceil(1100 / 512) = 3 (hash_block_tokens 512)"),
    ("1 -2 3", "line 2: column 'hash_ids': expected whole block ids "
               "0..72,057,594,037,927,935, got '-2'"),
    ("1 x", "expected whole block ids 0..72,057,594,037,927,935, got 'x'"),
    ("1 2.5", "got '2.5'"),
    ("72057594037927936", "got '72057594037927936'"),
], ids=["too-many", "negative", "word", "fraction", "too-large"])
def test_bad_csv_hash_ids(tmp_path, cell, problem):
    trace = write_csv(tmp_path / "t.csv", HEADER, "0,600,5,1 2", f"1,1100,5,{cell}")
    line, path = validate_error(tmp_path, f"kind: trace\nformat: kvsched\npath: {trace}\n")
    line = line.replace("line 3:", "line 2:")  # (the second data row is the file's line 3)
    assert line.startswith(f"error: {path}:5: workload.path: {trace} ") and problem in line, \
        line


def test_bad_csv_hash_ids_names_the_file_line(tmp_path):
    trace = write_csv(tmp_path / "t.csv", HEADER, "0,600,5,1 2", "1,600,5,1 2 3")
    line, _ = validate_error(tmp_path, f"kind: trace\nformat: kvsched\npath: {trace}\n")
    assert f"{trace} line 3: column 'hash_ids': 3 block ids are more than a 600-token" in line


def test_block_ids_and_a_group_on_one_row(tmp_path):
    trace = write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,hash_ids,"
                      "prefix_group,prefix_len", "0,100,5,1,,", "1,100,5,1,sys,40")
    line, _ = validate_error(tmp_path, f"kind: trace\nformat: kvsched\npath: {trace}\n")
    assert (f"{trace} line 3: columns 'hash_ids' and 'prefix_group' are both set; a "
            f"request's shared prefix is its block ids or its group, not both") in line, line


def test_mooncake_still_needs_every_block(tmp_path):
    """Mooncake's rows carry all their blocks: a short list is refused as before."""
    trace = tmp_path / "m.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 1100, "output_length": 3,
                                 "hash_ids": [0, 1]}) + "\n", encoding="utf-8")
    line, _ = validate_error(tmp_path, f"kind: trace\nformat: mooncake\npath: {trace}\n")
    assert "expected ceil(1100 / 512) = 3 block ids (hash_block_tokens 512), got 2" in line


@pytest.mark.parametrize("requests, where, problem", [
    ("- {prompt_len: 1024, output_len: 8, hash_ids: [1, 2, 7]}\n",
     "workload.requests[0].hash_ids", "3 block ids are more than a 1024-token prompt holds: "
                                      "at most ceil(1024 / 512) = 2 (hash_block_tokens 512)"),
    ("- {prompt_len: 1024, output_len: 8}\n"
     "- {prompt_len: 1024, output_len: 8, hash_ids: [1, -2]}\n",
     "workload.requests[1].hash_ids[1]", "expected a value >= 0, got -2"),
    ("- {prompt_len: 1024, output_len: 8, hash_ids: [1, x]}\n",
     "workload.requests[0].hash_ids[1]", "integer"),
    ("- {prompt_len: 1024, output_len: 8, hash_ids: 3}\n",
     "workload.requests[0].hash_ids", "list"),
    ("- {prompt_len: 1024, output_len: 8, hash_ids: [1], prefix_group: g, prefix_len: 5}\n",
     "workload.requests[0]", "give hash_ids or prefix_group/prefix_len, not both"),
    ("- {prompt_len: 50, output_len: 2, prefix_group: g, prefix_len: 0}\n",
     "workload.requests[0]", "prefix_group 'g' has prefix_len 0; expected 1..prompt_len"),
    ("- {prompt_len: 50, output_len: 2, prefix_group: '', prefix_len: 5}\n",
     "workload.requests[0]", "give prefix_group and prefix_len together"),
], ids=["too-many", "negative", "word", "not-a-list", "with-group", "group-len-0",
        "empty-group-len"])
def test_bad_inline_hash_ids(tmp_path, requests, where, problem):
    line, path = validate_error(tmp_path, "kind: inline\nrequests:\n"
                                + textwrap.indent(requests, "  "))
    assert f"{where}: " in line and problem in line, line
    assert line.startswith(f"error: {path}:"), line  # the YAML line


def test_inline_hash_block_tokens_is_checked(tmp_path):
    line, _ = validate_error(tmp_path, "kind: inline\nhash_block_tokens: 0\nrequests:\n"
                             "  - {prompt_len: 5, output_len: 2}\n")
    assert "workload.hash_block_tokens" in line, line


# -- what the caches make of them -----------------------------------------------------

CACHES = [("vllm_v1", "hashed"), ("sglang", "radix")]


def run_two(tmp_path: Path, preset: str, block_size: int, hash_block_tokens: int,
            first: list[int], second: list[int], prompt: int) -> tuple[pd.DataFrame, dict]:
    """`kvsched run` of two inline requests, the second long after the first finished."""
    scenario = {"name": "h", "engine": {"preset": preset, "block_size": block_size,
                                        "num_blocks": 400},
                "workload": {"kind": "inline", "hash_block_tokens": hash_block_tokens,
                             "requests": [
                                 {"id": "a", "prompt_len": prompt, "output_len": 4,
                                  "hash_ids": first},
                                 {"id": "b", "arrival": 50, "prompt_len": prompt,
                                  "output_len": 4, "hash_ids": second}]}}
    path = tmp_path / "h.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in out.rglob("requests.csv")]
    table = pd.read_csv(folder).set_index("request_id")
    summary = json.loads((folder.parent / "summary.json").read_text(encoding="utf-8"))
    return table, summary


@pytest.mark.parametrize("preset, cache", CACHES, ids=[c for _, c in CACHES])
@pytest.mark.parametrize("block_size, hash_block_tokens", [(16, 16), (16, 64)],
                         ids=["ids-are-blocks", "ids-are-4-blocks"])
def test_two_shared_leading_ids_hit_two_ids_of_tokens(tmp_path, preset, cache, block_size,
                                                      hash_block_tokens):
    """[1, 2, 3] after [1, 2, 9]: the second finds 2 * hash_block_tokens tokens cached."""
    prompt = 3 * hash_block_tokens
    table, summary = run_two(tmp_path, preset, block_size, hash_block_tokens, [1, 2, 9],
                             [1, 2, 3], prompt)
    assert table.loc["a", "prefix_hit_tokens"] == 0
    assert table.loc["b", "prefix_hit_tokens"] == 2 * hash_block_tokens
    assert table.loc["b", "cached_tokens"] == 2 * hash_block_tokens
    assert summary["prefix_hit_rate"] == pytest.approx(2 * hash_block_tokens / (2 * prompt))
    assert summary["prefill_tokens_saved"] == 2 * hash_block_tokens


@pytest.mark.parametrize("preset, cache", CACHES, ids=[c for _, c in CACHES])
def test_a_different_first_id_shares_nothing(tmp_path, preset, cache):
    table, summary = run_two(tmp_path, preset, 16, 16, [1, 2, 3], [4, 2, 3], 48)
    assert table.loc["b", "prefix_hit_tokens"] == 0 and summary["prefix_hit_rate"] == 0


def scenario_for(tmp_path: Path, preset: str, block_size: int, hash_block_tokens: int,
                 lists: list[list[int]], extra: list[int]):
    """Requests one after another, each long after the one before finished; request i's
    prompt is its ids' full blocks and `extra[i]` tokens of its own."""
    requests = [{"id": f"q{i}", "arrival": 100 * i, "output_len": 2, "hash_ids": ids,
                 "prompt_len": len(ids) * hash_block_tokens + more}
                for i, (ids, more) in enumerate(zip(lists, extra, strict=True))]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "engine": {"preset": preset, "block_size": block_size,
                                "num_blocks": 2000},
        "workload": {"kind": "inline", "hash_block_tokens": hash_block_tokens,
                     "requests": requests}}), encoding="utf-8")
    return load_scenario(path).variants[0]


def leading(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(preset=st.sampled_from([p for p, _ in CACHES]), block_size=st.sampled_from([4, 16]),
       scale=st.integers(1, 3),
       lists=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=5), min_size=1,
                      max_size=6), data=st.data())
def test_hits_are_the_longest_run_of_leading_ids_seen_before(tmp_path, preset, block_size,
                                                             scale, lists, data):
    """With a pool that never evicts and requests one at a time, each request finds cached
    exactly k * hash_block_tokens tokens, k the most leading ids it shares with any earlier
    request (the ids' blocks are full; a request's own tail is never shared)."""
    hash_block_tokens = block_size * scale
    extra = data.draw(st.lists(st.integers(1, 2 * hash_block_tokens), min_size=len(lists),
                               max_size=len(lists)))
    variant = scenario_for(tmp_path, preset, block_size, hash_block_tokens, lists, extra)
    records = {r.request_id: r for r in run_variant(variant).requests}
    for i, ids in enumerate(lists):
        k = max((leading(ids, before) for before in lists[:i]), default=0)
        assert records[f"q{i}"].prefix_hit_tokens == k * hash_block_tokens, (i, lists)
