"""Workloads that carry prefix identity: trace block ids, prefix groups, system prompts,
multi-turn sessions; and the errors their bad input gets."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_workload import requests_for, synthetic, write_csv
from typer.testing import CliRunner

from kvsched import EngineConfig, simulate
from kvsched.cli import app
from kvsched.prefix import common_prefix
from kvsched.workload import PREFIX_GROUP, TAG_SHIFT, TRACE_BLOCK, TURN

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "scenarios" / "traces" / "mooncake_conversation_trace.jsonl"


def jsonl(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def row(t: int, n: int, ids: list, out: int = 3) -> dict:
    return {"timestamp": t, "input_length": n, "output_length": out, "hash_ids": ids}


def tags(prefix) -> set[int]:
    return {seg_id >> TAG_SHIFT for seg_id, _ in prefix.segments}


# -- traces ---------------------------------------------------------------------------


def test_mooncake_hash_ids_are_blocks_of_the_prompt(tmp_path):
    """Each id is 512 tokens, the last the rest; equal leading ids are a shared prefix."""
    path = jsonl(tmp_path / "m.jsonl", row(0, 1100, [0, 1, 2]), row(5, 1030, [0, 1, 7]),
                 row(9, 512, [0]))
    a, b, c = requests_for(tmp_path, {"kind": "trace", "format": "mooncake", "path": str(path)})
    assert [length for _, length in a.prefix.segments] == [512, 512, 76]
    assert a.prefix.num_tokens == a.prompt_len == 1100
    assert common_prefix(a.prefix.segments, b.prefix.segments) == 1024
    assert common_prefix(a.prefix.segments, c.prefix.segments) == 512
    assert tags(a.prefix) == {TRACE_BLOCK}


def test_hash_block_tokens_sets_the_block_size(tmp_path):
    path = jsonl(tmp_path / "m.jsonl", row(0, 10, [4, 5, 6]))
    (request,) = requests_for(tmp_path, {"kind": "trace", "format": "mooncake",
                                         "path": str(path), "hash_block_tokens": 4})
    assert [length for _, length in request.prefix.segments] == [4, 4, 2]


def test_the_shipped_conversation_trace_repeats_37_percent_of_its_blocks(tmp_path):
    """The Mooncake conversation trace, as shipped: every request has its blocks, and
    36.6% of block references repeat one seen before (the figure of issue 10)."""
    requests = requests_for(tmp_path, {"kind": "trace", "format": "mooncake",
                                       "path": str(SHIPPED)})
    assert len(requests) == 12_031
    assert all(r.prefix is not None and r.prefix.num_tokens == r.prompt_len for r in requests)
    blocks = [seg_id for r in requests for seg_id, _ in r.prefix.segments]
    assert len(blocks) == 288_500
    repeats = 1 - len(set(blocks)) / len(blocks)
    assert repeats == pytest.approx(0.366, abs=0.001)
    # Counting full blocks only (what a block cache can hold): 38.2% are repeats.
    hashes = [h for r in requests for h in r.prefix.block_hashes(512)]
    assert 1 - len(set(hashes)) / len(hashes) == pytest.approx(0.382, abs=0.001)


@pytest.mark.parametrize("options", [{"format": "kvsched"},
                                     {"columns": {"arrival_time": "arrival_time",
                                                  "prompt_len": "prompt_len",
                                                  "output_len": "output_len",
                                                  "prefix_group": "prefix_group",
                                                  "prefix_len": "prefix_len"}}],
                         ids=["kvsched", "columns"])
def test_csv_prefix_groups_share_their_first_tokens(tmp_path, options):
    path = write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,prefix_group,"
                     "prefix_len", "0,100,5,sys,40", "1,60,5,sys,40", "2,50,5,,",
                     "3,90,5,other,40")
    a, b, c, d = requests_for(tmp_path, {"kind": "trace", "path": str(path), **options})
    assert common_prefix(a.prefix.segments, b.prefix.segments) == 40
    assert a.prefix.num_tokens == 40 and c.prefix is None
    assert common_prefix(a.prefix.segments, d.prefix.segments) == 0
    assert tags(a.prefix) == tags(d.prefix) == {PREFIX_GROUP}


def test_inline_prefix_groups(tmp_path):
    requests = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"prompt_len": 50, "output_len": 2, "prefix_group": 1, "prefix_len": 30},
        {"prompt_len": 30, "output_len": 2, "prefix_group": 1, "prefix_len": 30}]})
    assert requests[0].prefix == requests[1].prefix


# -- synthetic ------------------------------------------------------------------------


def test_system_prompts_are_shared_by_their_group(tmp_path):
    """`share` of the requests start with one of `groups` prompts (length drawn per group),
    put before the drawn prompt; the same seed draws the same."""
    workload = synthetic(2000, system_prompts={
        "groups": 3, "prefix_len": {"kind": "uniform", "low": 200, "high": 400},
        "share": 0.75})
    requests = requests_for(tmp_path, workload, seed=4)
    users = [r for r in requests if r.prefix is not None]
    assert len(users) / len(requests) == pytest.approx(0.75, abs=0.03)
    lengths = {seg for r in users for seg in r.prefix.segments}
    assert len(lengths) == 3 and len({seg_id for seg_id, _ in lengths}) == 3
    assert all(200 <= length <= 400 for _, length in lengths)
    assert all(r.prompt_len == 100 + r.prefix.num_tokens for r in users)
    assert all(r.prompt_len == 100 for r in requests if r.prefix is None)
    assert requests_for(tmp_path / "again", workload, seed=4) == requests
    assert requests_for(tmp_path / "other", workload, seed=5) != requests


def test_system_prompts_can_be_kept_to_some_classes(tmp_path):
    """`classes`: only requests of those mix classes get a system prompt; the draw is the
    same as without it for them (the other requests simply lose theirs)."""
    mix = [{"name": "hot", "weight": 9, "prompt_len": 50, "output_len": 5},
           {"name": "cold", "weight": 1, "prompt_len": 800, "output_len": 5}]
    keyed = synthetic(1000, mix=mix, system_prompts={"groups": 2, "prefix_len": 300,
                                                     "classes": ["hot"]})
    keyed.pop("prompt_len"), keyed.pop("output_len")
    plain = {**keyed, "system_prompts": {"groups": 2, "prefix_len": 300}}
    with_classes = requests_for(tmp_path / "a", keyed)
    without = requests_for(tmp_path / "b", plain)
    assert all(r.prefix is None and r.prompt_len == 800
               for r in with_classes if r.class_name == "cold")
    assert sum(r.prefix is not None for r in with_classes if r.class_name == "hot") > 800
    assert [(r.prefix, r.prompt_len) for r in with_classes if r.class_name == "hot"] == [
        (r.prefix, r.prompt_len) for r in without if r.class_name == "hot"]


def test_sessions_grow_each_prompt_by_the_last_answer_and_new_tokens(tmp_path):
    workload = synthetic(30, sessions={"turns": {"kind": "uniform", "low": 1, "high": 4},
                                       "user_len": 25, "think_time": 2},
                         output_len={"kind": "uniform", "low": 5, "high": 9},
                         system_prompts={"groups": 2, "prefix_len": 64})
    requests = requests_for(tmp_path, workload, seed=1)
    by_id = {r.request_id: r for r in requests}
    turns = [r for r in requests if r.after is not None]
    assert turns and len({r.session for r in requests}) == 30
    for turn in turns:
        before = by_id[turn.after]
        assert turn.session == before.session and turn.think_time == 2
        assert turn.prompt_len == before.prompt_len + before.output_len + 25
        # It repeats the previous turn's prompt and answer, token for token.
        assert common_prefix(turn.prefix.segments, before.prefix.segments) == (
            before.prompt_len + before.output_len)
    for r in requests:
        assert r.prefix.num_tokens == r.prompt_len + r.output_len
        assert tags(r.prefix) == {PREFIX_GROUP, TURN}
    assert [r.request_id for r in requests] == [f"r{i}" for i in range(len(requests))]
    assert requests_for(tmp_path / "again", workload, seed=1) == requests


def test_sessions_keep_the_class_of_their_first_turn(tmp_path):
    workload = {"kind": "synthetic", "num_requests": 40, "arrival": {"kind": "poisson",
                                                                     "rate": 1},
                "mix": [{"name": "chat", "weight": 1, "prompt_len": 10, "output_len": 7},
                        {"name": "code", "weight": 1, "prompt_len": 10, "output_len": 3,
                         "priority": 2}],
                "sessions": {"turns": 3, "user_len": 5,
                             "think_time": {"kind": "exponential", "mean": 1.5}}}
    requests = requests_for(tmp_path, workload)
    assert len(requests) == 120
    for r in requests:
        assert r.output_len == (7 if r.class_name == "chat" else 3)
        assert r.priority == (0 if r.class_name == "chat" else 2)
    thinks = [r.think_time for r in requests if r.after]
    assert len(set(thinks)) == len(thinks) and all(t >= 0 for t in thinks)


def test_a_session_scenario_runs_each_turn_after_the_last_answer(tmp_path):
    """Through the CLI: requests.csv holds every turn, each arriving after its previous
    turn finished (plus the think time)."""
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""\
        name: chat
        workload:
          kind: synthetic
          num_requests: 6
          arrival: {kind: poisson, rate: 0.2}
          prompt_len: 20
          output_len: 8
          sessions: {turns: 3, user_len: 10, think_time: 4}
        """), encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    import pandas as pd
    table = pd.read_csv(out / "chat" / "base" / "requests.csv").set_index("request_id")
    assert len(table) == 18 and (table["status"] == "finished").all()
    for k in range(6):
        for t in (1, 2):
            turn, before = table.loc[f"r{3 * k + t}"], table.loc[f"r{3 * k + t - 1}"]
            assert turn["arrival_time"] == pytest.approx(before["finish_time"] + 4)


# -- bad input ------------------------------------------------------------------------


def validate_error(tmp_path: Path, workload: str) -> tuple[str, Path]:
    """`kvsched validate` on a scenario with this workload: exit 2, one line; the line."""
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload:\n" + textwrap.indent(textwrap.dedent(workload), "  "),
                    encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0], path


@pytest.mark.parametrize("ids, problem", [
    ([0, 1], "line 2: column 'hash_ids': expected ceil(1100 / 512) = 3 block ids "
             "(hash_block_tokens 512), got 2"),
    ([0, 1, 2, 3], "got 4"),
    ([0, "x", 2], "line 2: column 'hash_ids': expected whole block ids 0..72,057,594,037,927,935, "
                  "got 'x'"),
    ([0, 1.5, 2], "expected whole block ids"),
    ([0, -1, 2], "expected whole block ids"),
    ("0 1 2", "line 2: column 'hash_ids': expected a list of block ids, got '0 1 2'"),
], ids=["too-few", "too-many", "word", "fraction", "negative", "not-a-list"])
def test_bad_hash_ids(tmp_path, ids, problem):
    trace = jsonl(tmp_path / "m.jsonl", row(0, 600, [0, 1]), row(1, 1100, ids))
    line, path = validate_error(tmp_path, f"kind: trace\nformat: mooncake\npath: {trace}\n")
    assert line.startswith(f"error: {path}:5: workload.path: ") and problem in line, line


@pytest.mark.parametrize("rows, problem", [
    (["0,100,5,sys,40", "1,30,5,sys,40"],
     "line 3: column 'prefix_len': 40 is more than the prompt (30 tokens)"),
    (["0,100,5,sys,40", "1,100,5,sys,50"],
     "line 3: prefix_group 'sys' has prefix_len 50 here but 40 at line 2; a group shares "
     "one prefix length"),
    (["0,100,5,,40"], "line 2: column 'prefix_len' is '40' but 'prefix_group' is empty; "
                      "a prefix_len needs a prefix_group"),
    (["0,100,5,sys,"], "line 2: column 'prefix_group' is 'sys' but 'prefix_len' is empty; a "
                       "prefix_group needs a prefix_len"),
    (["0,100,5,sys,4.5"], "line 2: column 'prefix_len': expected a whole number"),
], ids=["longer-than-prompt", "two-lengths", "len-without-group", "group-without-len",
        "fraction"])
def test_bad_prefix_groups(tmp_path, rows, problem):
    trace = write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,prefix_group,"
                      "prefix_len", *rows)
    line, path = validate_error(tmp_path, f"kind: trace\nformat: kvsched\npath: {trace}\n")
    assert line.startswith(f"error: {path}:5: workload.path: ") and problem in line, line


@pytest.mark.parametrize("requests, where, problem", [
    ("- {id: a, prompt_len: 5, output_len: 2, after: b}\n"
     "- {id: b, prompt_len: 5, output_len: 2}\n",
     "workload.requests[0].after", "'b' is a later request of the workload; expected the id "
                                   "of an earlier request"),
    ("- {id: a, prompt_len: 5, output_len: 2, after: nobody}\n",
     "workload.requests[0].after", "'nobody' is no request id of the workload"),
    ("- {id: a, prompt_len: 5, output_len: 2}\n"
     "- {id: b, prompt_len: 5, output_len: 2, after: a, arrival: 3}\n",
     "workload.requests[1]", "give no arrival"),
    ("- {id: a, prompt_len: 5, output_len: 2, prefix_group: g, prefix_len: 6}\n",
     "workload.requests[0]", "prefix_len (6) must be <= prompt_len (5)"),
    ("- {id: a, prompt_len: 5, output_len: 2, prefix_len: 3}\n",
     "workload.requests[0]", "give prefix_group and prefix_len together"),
    ("- {id: a, prompt_len: 9, output_len: 2, prefix_group: g, prefix_len: 3}\n"
     "- {id: b, prompt_len: 9, output_len: 2, prefix_group: g, prefix_len: 4}\n",
     "workload.requests[1].prefix_len", "prefix_group 'g' has prefix_len 4 here but 3 at "
                                        "request 0"),
], ids=["later", "unknown", "arrival", "longer", "len-alone", "two-lengths"])
def test_bad_inline_turns_and_groups(tmp_path, requests, where, problem):
    line, path = validate_error(tmp_path, "kind: inline\nrequests:\n"
                                + textwrap.indent(requests, "  "))
    assert f"{where}: " in line and problem in line, line


@pytest.mark.parametrize("fragment, where, problem", [
    ("sessions: {turns: 2000, user_len: 5}", "workload.sessions.turns",
     "a conversation of 2,000 turns; at most 1,000 allowed"),
    ("sessions: {turns: 2, user_len: 5, tink_time: 1}", "workload.sessions.tink_time",
     "unknown key"),
    ("system_prompts: {groups: 2, prefix_len: 5, share: 1.5}",
     "workload.system_prompts.share", "1"),
    ("system_prompts: {groups: 0, prefix_len: 5}", "workload.system_prompts.groups", "1"),
    ("system_prompts: {groups: 2, prefix_len: 5, classes: [hot]}",
     "workload", "system_prompts.classes: no mix class 'hot' (classes: none: give a mix)"),
], ids=["turns", "unknown-key", "share", "groups", "classes"])
def test_bad_synthetic_prefix_keys(tmp_path, fragment, where, problem):
    line, _ = validate_error(tmp_path, "kind: synthetic\nnum_requests: 3\n"
                             "arrival: {kind: poisson, rate: 1}\nprompt_len: 10\n"
                             f"output_len: 3\n{fragment}\n")
    assert where in line and problem in line, line


# -- properties -----------------------------------------------------------------------

LENGTHS = st.one_of(st.integers(1, 40),
                    st.integers(1, 30).map(lambda low: {"kind": "uniform", "low": low,
                                                        "high": low + 10}))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 12), groups=st.integers(1, 4), share=st.sampled_from([0.0, 0.5, 1.0]),
       prefix_len=LENGTHS, turns=st.one_of(st.integers(1, 4), st.just(
           {"kind": "uniform", "low": 1, "high": 5})), user_len=LENGTHS,
       think=st.sampled_from([0, 2.5, {"kind": "exponential", "mean": 1.0}]),
       seed=st.integers(0, 3))
def test_synthetic_prefixes_and_turns_hold_together(tmp_path, n, groups, share, prefix_len,
                                                    turns, user_len, think, seed):
    """Any system prompts and sessions: turns follow an earlier turn of their conversation
    and repeat its prompt and answer; a group's prompt has one length; a roomy engine
    finishes every turn after the previous answer."""
    workload = synthetic(n, system_prompts={"groups": groups, "prefix_len": prefix_len,
                                            "share": share},
                         sessions={"turns": turns, "user_len": user_len,
                                   "think_time": think})
    requests = requests_for(tmp_path / f"{seed}", workload, seed=seed)
    by_id = {r.request_id: r for r in requests}
    group_len: dict[int, int] = {}
    for position, r in enumerate(requests):
        assert r.prefix.num_tokens == r.prompt_len + r.output_len
        first_id, first_len = r.prefix.segments[0]
        if first_id >> TAG_SHIFT == PREFIX_GROUP:
            assert group_len.setdefault(first_id, first_len) == first_len
        if r.after is None:
            continue
        before = by_id[r.after]
        assert requests.index(before) < position and before.session == r.session
        assert r.prompt_len > before.prompt_len + before.output_len
        assert common_prefix(r.prefix.segments, before.prefix.segments) == (
            before.prompt_len + before.output_len)
    assert len(group_len) <= groups
    result = simulate(requests, EngineConfig(max_num_batched_tokens=8192, num_blocks=4096))
    records = {r.request_id: r for r in result.requests}
    assert all(r.status == "finished" for r in result.requests)
    for r in requests:
        if r.after is not None:
            assert records[r.request_id].arrival_time == pytest.approx(
                records[r.after].finish_time + r.think_time)


def test_a_csv_trace_can_hold_turns(tmp_path):
    """kvsched format: `after` and `think_time` (arrival units, scaled with the times); the
    turn's own arrival_time only places it in the window."""
    path = write_csv(tmp_path / "t.csv", "request_id,arrival_time,prompt_len,output_len,"
                     "after,think_time", "a,0,10,4,,", "b,0,10,4,a,2", "c,1,10,4,,")
    a, b, c = requests_for(tmp_path, {"kind": "trace", "format": "kvsched",
                                      "path": str(path), "time_scale": 0.5})
    assert (b.after, b.think_time) == ("a", 1.0) and a.after is None and c.think_time == 0
    result = simulate([a, b, c])
    assert result.requests[1].arrival_time == result.requests[0].finish_time + 1.0


@pytest.mark.parametrize("rows, problem", [
    (["a,0,10,4,b,", "b,0,10,4,,"], "line 2: column 'after': 'b' is no earlier request of "
                                    "the replayed rows; expected the id of an earlier one"),
    (["a,0,10,4,zz,"], "line 2: column 'after': 'zz' is no earlier request"),
    (["a,0,10,4,,3"], "line 2: column 'think_time' is set but 'after' is empty"),
    (["a,0,10,4,,", "b,0,10,4,a,-1"], "line 3: column 'think_time': expected a number >= 0"),
], ids=["later", "unknown", "think-alone", "negative-think"])
def test_bad_csv_turns(tmp_path, rows, problem):
    trace = write_csv(tmp_path / "t.csv", "request_id,arrival_time,prompt_len,output_len,after,"
                      "think_time", *rows)
    line, path = validate_error(tmp_path, f"kind: trace\nformat: kvsched\npath: {trace}\n")
    assert line.startswith(f"error: {path}:5: workload.path: ") and problem in line, line
