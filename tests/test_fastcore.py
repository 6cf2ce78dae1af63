"""The compiled loop (kvsched/_fastcore.c) gives the Python loop's records, step rows,
stretches, events and summary, byte for byte; where it gives up, the Python loop's run is
what comes out, and nothing of the abandoned run reaches a streaming sink."""

from __future__ import annotations

import math
import os
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from run_modules import modules_loaded
from test_invariants import SETTINGS, configs
from typer.testing import CliRunner

from kvsched import (
    ConstantStep,
    EngineConfig,
    LinearStep,
    StepClock,
    fastcore,
    make_policy,
    simulate,
)
from kvsched.cli import app
from kvsched.kinds import EventKind
from kvsched.records.floatfmt import FORMAT
from kvsched.records.steplog import RecordMode, StepLog
from kvsched.records.table import RecordTable
from kvsched.request_columns import RequestColumns

pytestmark = pytest.mark.skipif(not fastcore.available(),
                                reason="the compiled loop is not built (no C compiler)")


@contextmanager
def python_loop():
    """The Python loop only, for the reference run."""
    before = os.environ.get("KVSCHED_CORE")
    os.environ["KVSCHED_CORE"] = "python"
    try:
        yield
    finally:
        if before is None:
            del os.environ["KVSCHED_CORE"]
        else:
            os.environ["KVSCHED_CORE"] = before


@st.composite
def column_workloads(draw, max_requests: int = 30):
    """Requests as columns: arrivals in bursts or spread out, short and long prompts."""
    n = draw(st.integers(1, max_requests))
    integral = draw(st.booleans())
    arrival = [float(draw(st.integers(0, 30))) if integral
               else round(draw(st.floats(0, 30, allow_nan=False)), 3) for _ in range(n)]
    prompt = [draw(st.integers(1, 200 if draw(st.integers(0, 4)) == 0 else 30))
              for _ in range(n)]
    output = [draw(st.integers(1, 60)) for _ in range(n)]
    return RequestColumns(np.array(arrival), np.array(prompt), np.array(output))


clocks = st.one_of(
    st.just(StepClock()), st.sampled_from([0.0039, 0.02, 0.25]).map(ConstantStep),
    st.builds(LinearStep, base=st.sampled_from([0.001, 0.01]),
              per_prefill_token=st.sampled_from([0.0, 1e-4, 3.3e-5]),
              per_decode=st.sampled_from([0.0, 1e-4]),
              per_kv_token=st.sampled_from([0.0, 1e-6, 7.7e-7])))


def both(requests, config, clock, **kwargs):
    with python_loop():
        reference = simulate(requests, config, make_policy("fcfs"), clock, **kwargs)
    compiled = simulate(requests, config, make_policy("fcfs"), clock, **kwargs)
    return reference, compiled


def assert_same(reference, compiled):
    assert list(compiled.requests) == list(reference.requests)
    assert compiled.step_log.kept == reference.step_log.kept  # rows and stretches alike
    assert compiled.events == reference.events
    assert compiled.summary == reference.summary


@settings(max_examples=150, **SETTINGS)
@given(column_workloads(), configs(), clocks, st.booleans())
def test_the_compiled_loop_gives_the_python_loops_run(requests, config, clock, stretches):
    """Every knob of the first engine, roomy pools and pools that preempt (where the
    compiled loop gives up and the Python loop runs)."""
    assert_same(*both(requests, config, clock, stretches=stretches))


def roomy(**knobs) -> EngineConfig:
    return EngineConfig(**{"max_num_batched_tokens": 64, "max_num_seqs": 8, "block_size": 4,
                           "num_blocks": 4000, "watermark": 0.0, "chunked_prefill": True,
                           **knobs})


@settings(max_examples=80, **SETTINGS)
@given(column_workloads(), st.sampled_from([16, 64, 512]), st.integers(1, 12),
       st.sampled_from([1, 4, 16]), st.sampled_from([0, 5, 16]), clocks)
def test_it_carries_every_run_of_a_roomy_pool(requests, budget, max_num_seqs, block_size,
                                               threshold, clock):
    """Chunked prefill in a pool that holds everything: nothing preempts and no head
    blocks one behind it, so the compiled loop itself makes the run (it does not give up),
    and it is the Python loop's. (Without chunking, a head that needs more tokens than a
    step has left blocks a shorter one behind it: a head-of-line event, left to Python.)"""
    config = roomy(max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                   block_size=block_size, chunked_prefill=True,
                   long_prefill_token_threshold=threshold,
                   num_blocks=40 * 300 // block_size)
    policy = make_policy("fcfs")
    assert fastcore.carries(requests, config, policy, clock, None, False)
    made = fastcore.run(requests, config, clock, RecordTable(requests),
                        StepLog(config.usable_blocks), [], None, 1 << 15, None, True, True)
    assert made is not None
    assert_same(*both(requests, config, clock))


def test_it_gives_up_on_a_preemption_and_streams_nothing_twice():
    """A pool too small for the batch: the compiled loop gives up before anything reaches
    the sinks, and the Python loop's events and steps arrive once, in order."""
    requests = RequestColumns(np.zeros(6), np.full(6, 40), np.full(6, 30))
    config = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=4,
                          num_blocks=60, watermark=0.0, chunked_prefill=True)
    clock = ConstantStep(0.01)
    assert fastcore.carries(requests, config, make_policy("fcfs"), clock, None, False)
    assert fastcore.run(requests, config, clock, RecordTable(requests), StepLog(60), [], None,
                        1 << 15, None, True, True) is None
    streamed: list[tuple] = []
    reference, compiled = both(requests, config, clock)
    assert compiled.summary["num_preemptions"] > 0
    run = simulate(requests, config, make_policy("fcfs"), clock,
                   event_sink=streamed.extend)
    assert streamed == reference.events
    assert_same(reference, compiled)
    assert list(run.requests) == list(reference.requests)


@pytest.mark.parametrize("held", [fastcore.HELD_BYTES, 0])
def test_the_command_writes_the_same_bytes(tmp_path, monkeypatch, held):
    """Held back and handed on at the end (records that fit), or streamed by a last pass
    after a dry one (records that outgrow what the first pass holds)."""
    monkeypatch.setattr(fastcore, "HELD_BYTES", held)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nseed: 3\n"
        "engine: {max_num_batched_tokens: 512, max_num_seqs: 16, block_size: 16,"
        " num_blocks: 2000, watermark: 0, chunked_prefill: true}\n"
        "time: {kind: constant, step_time: 0.01}\n"
        "workload: {kind: synthetic, num_requests: 300, arrival: {kind: poisson, rate: 20},"
        " prompt_len: {kind: lognormal, median: 300, sigma: 0.8, max: 2000},"
        " output_len: {kind: lognormal, median: 40, sigma: 0.9, max: 300}}\n")
    runner = CliRunner()
    out = {}
    for mode in ("python", "c"):
        env = {"KVSCHED_CORE": mode}
        for records in ("full", "compact"):
            folder = tmp_path / f"{mode}-{records}"
            result = runner.invoke(app, ["run", str(scenario), "--records", records,
                                         "--out", str(folder)], env=env)
            assert result.exit_code == 0, result.output
            out[mode, records] = {p.relative_to(folder): p.read_bytes()
                                  for p in folder.rglob("*.csv")}
    for records in ("full", "compact"):
        assert out["c", records] == out["python", records]
        assert len(out["c", records]) >= 4  # requests, steps, events, summary


texts = st.one_of(st.none(), st.text(st.sampled_from("ab ,\"\n\r;é-"), max_size=6))


@settings(max_examples=200, **SETTINGS)
@given(st.data())
def test_format_csv_writes_what_the_csv_module_writes(data):
    """Every kind of column, quoting included; a carriage return is left to the csv module."""
    import csv
    import io

    n = data.draw(st.integers(0, 8))
    ints = st.lists(st.integers(-5, 2**40), min_size=n, max_size=n)
    floats = st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
        [0.0, -0.0, 0.0039, 1234567890.5, 1e-5, 3600.25]), min_size=n, max_size=n)
    names = tuple(data.draw(st.lists(st.text(st.sampled_from("ab,\" "), min_size=1,
                                             max_size=4), min_size=1, max_size=3)))
    codes = data.draw(st.lists(st.integers(-1, len(names) - 1), min_size=n, max_size=n))
    i, big_i, f, big_f, r = (data.draw(ints), data.draw(ints), data.draw(floats),
                             data.draw(floats), data.draw(ints))
    s = data.draw(st.lists(texts, min_size=n, max_size=n))
    columns = [("i", np.array(i, dtype=np.int64)), ("I", np.array(big_i, dtype=np.int64)),
               ("f", np.array(f, dtype=np.float64)), ("F", np.array(big_f, dtype=np.float64)),
               ("r", np.array(r, dtype=np.int64)), ("k", np.array(codes, dtype=np.int64), names),
               ("s", s)]
    rows = zip(i, [v if v >= 0 else None for v in big_i],
               [None if v != v else FORMAT % v for v in f], [FORMAT % v for v in big_f],
               [f"r{v}" for v in r], [names[k] if k >= 0 else None for k in codes], s,
               strict=True)
    expected = io.StringIO()
    csv.writer(expected, lineterminator="\n").writerows(rows)
    made = fastcore.format_csv(columns, n)
    if any(t is not None and "\r" in t for t in s):
        assert made is None
    else:
        assert made is not None and made.decode() == expected.getvalue()


@settings(max_examples=100, **SETTINGS)
@given(st.lists(st.tuples(st.integers(-5, 2**70), st.floats() | st.integers(0, 3),
                          texts, st.sampled_from(list(EventKind))), max_size=8))
def test_a_row_sink_writes_what_the_csv_module_writes(tmp_path_factory, rows):
    """RowCsv's chunks (events), made in C a column at a time where their kinds allow it,
    are the csv module's bytes: mixed kinds, big ints and carriage returns included."""
    import csv
    import io

    from kvsched.records.csvout import RowCsv
    from kvsched.records.floatfmt import formatted

    expected = io.StringIO()
    csv.writer(expected, lineterminator="\n").writerows(formatted([("a", "b", "c", "d"), *rows]))
    path = tmp_path_factory.mktemp("rows") / "rows.csv"
    sink = RowCsv(path, ("a", "b", "c", "d"))
    sink(list(rows))
    sink.close()
    assert path.read_bytes().decode("utf-8") == expected.getvalue()


def test_a_queue_of_thousands_at_once():
    """Six thousand requests at time 0: the waiting queue's storage is compacted as its
    head moves on (past 4,096 taken), and the run is still the Python loop's."""
    n = 6000
    requests = RequestColumns(np.zeros(n), np.full(n, 8) + np.arange(n) % 5,
                              np.full(n, 3) + np.arange(n) % 4)
    config = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=64, block_size=16,
                          num_blocks=4000, watermark=0.0, chunked_prefill=True)
    clock = ConstantStep(0.01)
    assert fastcore.run(requests, config, clock, RecordTable(requests), StepLog(4000), [],
                        None, 1 << 15, None, True, True) is not None
    assert_same(*both(requests, config, clock))


def test_head_of_line_blocks_are_carried_and_kept_for_the_diagnosis(tmp_path):
    """Without chunking, a head that needs more tokens than the step has left blocks a
    short prompt behind it: the compiled loop makes the hol_block and hol_release events
    (as tuples for the diagnosis even when the events are streamed as text)."""
    from kvsched.records import EVENT_COLUMNS
    from kvsched.records.csvout import RowCsv

    requests = RequestColumns(np.array([0.0, 0.0, 0.0, 0.5, 0.5]), np.array([60, 50, 3, 62, 2]),
                              np.array([5, 4, 6, 3, 2]))
    config = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4,
                          num_blocks=400, watermark=0.0, chunked_prefill=False)
    clock = LinearStep(0.01, 1e-4, 1e-4, 1e-6)
    assert fastcore.run(requests, config, clock, RecordTable(requests), StepLog(400), [], None,
                        1 << 15, None, True, True) is not None
    reference, compiled = both(requests, config, clock)
    assert_same(reference, compiled)
    kinds = [event[3] for event in compiled.events]
    assert "hol_block" in kinds and "hol_release" in kinds
    files = {}
    for mode in ("python", "c"):
        sink = RowCsv(tmp_path / f"{mode}.csv", EVENT_COLUMNS)
        if mode == "python":
            with python_loop():
                run = simulate(requests, config, make_policy("fcfs"), clock, event_sink=sink)
        else:
            run = simulate(requests, config, make_policy("fcfs"), clock, event_sink=sink)
        sink.close()
        files[mode] = (tmp_path / f"{mode}.csv").read_bytes()
        assert [e for e in run.events if e[3].startswith("hol")] == [
            e for e in reference.events if e[3].startswith("hol")]
    assert files["c"] == files["python"]


def test_a_histogram_past_its_exact_values_buckets_as_the_python_one():
    """Steps priced by the KV they read take thousands of distinct lengths: the inter-token
    gap histogram turns to buckets (past 4,096 distinct values), and its percentiles and
    mean are the Python loop's."""
    rng = np.random.default_rng(7)
    n = 400
    requests = RequestColumns(np.sort(rng.uniform(0, 60, n)), rng.integers(20, 900, n),
                              rng.integers(20, 120, n))
    config = roomy(max_num_batched_tokens=512, max_num_seqs=32, num_blocks=20000)
    clock = LinearStep(0.005, 1e-5, 1e-4, 3e-7)
    made = fastcore.run(requests, config, clock, RecordTable(requests),
                        StepLog(config.usable_blocks), [], None, 1 << 15, None, True, True)
    assert made is not None and made[1] is not None and not made[1].is_exact
    reference, compiled = both(requests, config, clock)
    assert_same(reference, compiled)
    assert compiled.summary["itl_p99"] is not None


def test_without_itl_the_figures_are_none_as_in_python():
    requests = RequestColumns(np.arange(20) * 0.1, np.full(20, 50), np.full(20, 9))
    config = roomy(max_num_batched_tokens=128)
    reference, compiled = both(requests, config, ConstantStep(0.01), itl=False)
    assert_same(reference, compiled)
    assert compiled.summary["itl_p50"] is None


def test_what_the_loop_cannot_hold_stays_with_python():
    """Found by review: values past the loop's 64-bit counters or an infinite price are not
    carried, and the Python loop's run (or its error) is what comes out."""
    with pytest.raises(ValueError, match=r"arrival_time must be >= 0 and <= 2\*\*50"):
        RequestColumns(np.array([0.0, 1e19]), np.array([4, 4]), np.array([2, 2]))
    requests = RequestColumns(np.array([0.0, 2.0**50]), np.array([4, 4]), np.array([2, 2]))
    config = roomy()
    policy = make_policy("fcfs")
    run = simulate(requests, config, policy, StepClock())
    assert [r.finish_time for r in run.requests] == [2.0, 2.0**50 + 2]
    small = RequestColumns(np.zeros(2), np.array([4, 4]), np.array([2, 2]))
    with pytest.raises(ValueError, match=r"max_steps must be <= "):
        roomy(max_steps=2**63)
    assert not fastcore.carries(small, config, policy, LinearStep(per_swapped_block=math.inf),
                                None, False)
    with pytest.raises(ValueError, match="unknown column kind"):
        fastcore.format_csv([("x", np.zeros(2, dtype=np.int64))], 2)
    with pytest.raises(ValueError, match="float64"):
        fastcore.format_csv([("i", np.zeros(4, dtype=np.int32))], 2)


def drained_run(requests, config, clock, held, monkeypatch):
    """fastcore.run with every event drained at once to a list: (result, drained events,
    kept steps), with the first pass holding at most `held` bytes."""
    monkeypatch.setattr(fastcore, "HELD_BYTES", held)
    events: list[tuple] = []
    drained: list[tuple] = []

    def drain():
        drained.extend(events)
        del events[:]

    log = StepLog(config.usable_blocks, keep=True)
    made = fastcore.run(requests, config, clock, RecordTable(requests), log, events, drain,
                        1, None, True, True)
    return made, drained + events, log.kept


def test_a_run_that_outgrows_the_first_pass_streams_only_once_it_is_known_to_finish(
        monkeypatch):
    """Past `HELD_BYTES` the first pass stops; a dry pass finds a preemption ahead, and
    nothing has reached the sinks. A run that finishes streams the same events and steps
    however much the first pass could hold."""
    requests = RequestColumns(np.zeros(6), np.full(6, 40), np.full(6, 30))
    tight = EngineConfig(max_num_batched_tokens=256, max_num_seqs=8, block_size=4,
                         num_blocks=60, watermark=0.0, chunked_prefill=True)
    clock = ConstantStep(0.01)
    made, drained, steps = drained_run(requests, tight, clock, 0, monkeypatch)
    assert made is None and drained == [] and steps == []
    roomy_pool = roomy(num_blocks=4000)
    held = drained_run(requests, roomy_pool, clock, 1 << 30, monkeypatch)
    streamed = drained_run(requests, roomy_pool, clock, 0, monkeypatch)
    assert held[0] is not None and streamed[0] is not None
    assert held[1] == streamed[1] and len(held[1]) >= 12  # admissions and finishes
    assert held[2] == streamed[2] and held[2]


@pytest.mark.parametrize("mode", [RecordMode.FULL, RecordMode.COMPACT])
def test_blocks_written_by_arrow_are_the_c_text(tmp_path, monkeypatch, mode):
    """The compiled loop's step blocks as `steps.csv`: formatted in C (`format_runs` for a
    row per step, `format_csv` for a row per segment), or expanded by numpy and written by
    Arrow when the formatter is off: the same bytes."""
    from kvsched.records.csvout import StepCsv

    n = 400
    rng = np.random.default_rng(5)
    requests = RequestColumns(np.sort(rng.uniform(0, 40, n)), rng.integers(1, 300, n),
                              rng.integers(1, 80, n))
    config = roomy(max_num_batched_tokens=256, max_num_seqs=16, num_blocks=40_000)
    blocks = []

    class Keep:
        def __call__(self, chunk):
            raise AssertionError("the compiled loop hands blocks")

        def block(self, block):
            blocks.append(block)

    log = StepLog(config.usable_blocks, keep=False, sink=Keep())
    assert fastcore.run(requests, config, ConstantStep(0.01), RecordTable(requests), log, [],
                        None, 1 << 15, None, True, True) is not None
    assert sum(len(b) for b in blocks) > 100
    files = []
    for formatter in (True, False):
        monkeypatch.setattr(fastcore, "available", lambda on=formatter: on)
        path = tmp_path / f"{formatter}.csv"
        writer = StepCsv(path, mode, config.usable_blocks)
        for block in blocks:
            writer.block(block)
        writer.close()
        files.append(path.read_bytes())
    assert files[0] == files[1] and files[0].count(b"\n") > 100


def test_format_runs_makes_room_for_long_constant_texts():
    """A row of constant texts at the longest allowed (32 bytes each) fits its reserve,
    however the rows fall against the buffer's growth (tests run under ASan catch more)."""
    text = fastcore.format_runs([("K", "i", b"a" * 32)] * 3, np.array([3000], dtype=np.int64))
    assert text == (",".join(["a" * 32] * 3) + "\n").encode() * 3000
    with pytest.raises(ValueError, match="32 bytes"):
        fastcore.format_runs([("K", "i", b"a" * 33)], np.array([1], dtype=np.int64))


def test_a_sink_of_rows_gets_the_python_loops_segments():
    """A step log whose sink takes rows and stretches (no `block`) gets, from the compiled
    loop's blocks, what the Python loop hands it, and keeps them too when asked."""
    requests = RequestColumns(np.array([0.0, 0.0, 1.0, 2.5]), np.array([30, 9, 50, 4]),
                              np.array([40, 7, 20, 12]))
    config = roomy()
    clock = ConstantStep(0.01)
    got = {}
    for mode in ("python", "c"):
        chunks: list = []
        log = StepLog(config.usable_blocks, keep=True, sink=chunks.extend)
        if mode == "python":
            with python_loop():
                simulate(requests, config, make_policy("fcfs"), clock, step_log=log)
        else:
            simulate(requests, config, make_policy("fcfs"), clock, step_log=log)
        got[mode] = (chunks, log.kept)
    assert got["c"] == got["python"] and got["c"][0] and got["c"][0] == got["c"][1]


@pytest.mark.parametrize("block_size", [3, 257, 4096, fastcore._RING_BLOCKS])
def test_block_boundaries_a_whole_block_ahead_are_the_python_loops(block_size):
    """The compiled loop keeps the block boundaries due in a ring of a bucket per decode
    pass, block_size + 1 of them (with one fewer, this test fails): requests that cross
    their boundaries on the first and on the last pass a block allows, with stretches and
    without, are the Python loop's."""
    rng = np.random.default_rng(block_size)
    n = 40
    prompt = np.concatenate([np.full(n // 2, block_size),  # a boundary at the first decode
                             rng.integers(1, 2 * block_size + 1, n // 2)])
    output = rng.integers(1, 3 * min(block_size, 300), n) + 1
    requests = RequestColumns(np.sort(rng.uniform(0, 5, n)), prompt, output)
    blocks = int((-(-(prompt + output) // block_size)).sum()) + 4
    config = roomy(block_size=block_size, num_blocks=blocks,
                   max_num_batched_tokens=4 * block_size, max_num_seqs=64)
    assert fastcore.carries(requests, config, make_policy("fcfs"), ConstantStep(0.02), None,
                            False)
    for stretches in (True, False):
        made = fastcore.run(requests, config, ConstantStep(0.02), RecordTable(requests),
                            StepLog(config.usable_blocks), [], None, 1 << 15, None,
                            stretches, True)
        assert made is not None  # carried to the end: no preemption in this pool
        assert_same(*both(requests, config, ConstantStep(0.02), stretches=stretches))


def test_blocks_past_the_ring_stay_with_python():
    requests = RequestColumns(np.zeros(2), np.array([4, 4]), np.array([2, 2]))
    config = roomy(block_size=fastcore._RING_BLOCKS + 1)
    assert not fastcore.carries(requests, config, make_policy("fcfs"), StepClock(), None,
                                False)
    assert_same(*both(requests, config, StepClock()))


ENGINE_MODULES = ("kvsched.cluster.loop", "kvsched.engine", "kvsched.engine.mechanism",
                  "kvsched.waiting", "kvsched.kvcache", "kvsched.policies.spf",
                  "kvsched.policies.lpm", "kvsched.policies.dfs_weight")


def test_a_compiled_run_imports_neither_the_engine_nor_other_policies(tmp_path, monkeypatch):
    """The Python loop and its engine are imported only for a run the compiled loop does
    not carry, and a policy only when it is named (the registry loads it then)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\nengine: {num_blocks: 4000, watermark: 0, chunked_prefill: true}\n"
        "time: {kind: constant, step_time: 0.01}\n"
        "workload: {kind: synthetic, num_requests: 50, arrival: {kind: poisson, rate: 5}, "
        "prompt_len: 100, output_len: 20}\n")
    args = ["run", str(scenario), "--out", str(tmp_path / "out"), "--records", "summary"]
    assert modules_loaded(args, ENGINE_MODULES) == []
    monkeypatch.setenv("KVSCHED_CORE", "python")
    assert modules_loaded(args, ENGINE_MODULES) == list(ENGINE_MODULES[:5])
    assert modules_loaded([*args, "--set", "policy=spf"], ENGINE_MODULES) == list(
        ENGINE_MODULES[:6])
