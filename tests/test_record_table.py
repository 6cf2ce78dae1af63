"""Columnar workloads and records: the same run as lists of objects, in a tenth of the memory."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_invariants import SETTINGS, configs, workloads

from kvsched import EngineConfig, LinearStep, Request, make_policy, simulate
from kvsched.records.metrics import summarize
from kvsched.records.slo import Slo
from kvsched.records.table import RecordSubset, RecordTable, columns_of, rows_of
from kvsched.request_columns import RequestColumns
from kvsched.workload import build_requests


def _as_columns(requests: list[Request]) -> RequestColumns:
    """The same requests as columns (ids r0, r1, ...: `requests` must be named so)."""
    names = sorted({r.class_name for r in requests if r.class_name is not None})
    return RequestColumns(
        np.array([r.arrival_time for r in requests], dtype=float),
        np.array([r.prompt_len for r in requests]), np.array([r.output_len for r in requests]),
        np.array([r.priority for r in requests]),
        np.array([names.index(r.class_name) if r.class_name else -1 for r in requests]),
        names)


def _renamed(requests: list[Request]) -> list[Request]:
    return [Request(f"r{i}", float(r.arrival_time), r.prompt_len, r.output_len, r.priority,
                    r.class_name) for i, r in enumerate(requests)]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))
                                              if a.dtype.kind == "f" else a == b))


@settings(max_examples=60, **SETTINGS)
@given(workloads(), configs(), st.sampled_from(["fcfs", "priority", "spf"]))
def test_a_workload_as_columns_runs_as_the_same_workload_as_a_list(requests, config, policy):
    requests = _renamed(requests)
    clock = LinearStep(0.01, 0.0001)
    listed = simulate(requests, config, make_policy(policy), clock)
    columned = simulate(_as_columns(requests), config, make_policy(policy), clock)
    assert list(columned.requests) == list(listed.requests)
    assert columned.summary == listed.summary
    assert columned.steps == listed.steps and columned.events == listed.events


@settings(max_examples=60, **SETTINGS)
@given(workloads(), configs(), st.sampled_from(["fcfs", "priority"]),
       st.sampled_from([None, 0.5, 5.0]))
def test_the_table_reads_as_the_records_it_holds(requests, config, policy, ttft_target):
    slo = Slo(ttft=ttft_target, tpot=0.05) if ttft_target else None
    result = simulate(requests, config, make_policy(policy), LinearStep(0.01, 0.0001), slo=slo)
    table = result.requests
    assert isinstance(table, RecordTable)
    records = list(table)
    assert [table[i] for i in range(len(table))] == records
    assert table[-1] == records[-1] and table[1:3] == records[1:3]
    assert list(rows_of(table)) == [r.as_row() for r in records]
    # The columns of the table and those built from its records agree, value for value.
    mine, theirs = columns_of(table), columns_of(records)
    for name in ("arrival_time", "status", "first_scheduled_time", "ttft", "ttft_steps",
                 "e2e_latency", "queue_time", "num_preemptions", "num_recomputed_tokens",
                 "max_token_gap", "generated_tokens", "tpot", "prefix_hit_tokens",
                 "cached_tokens", "prompt_len", "output_len"):
        assert _same(getattr(mine, name), getattr(theirs, name)), name
    # And so does the summary of each (a cluster's replicas summarise lists).
    assert summarize(records, result.step_log.stats, slo) == \
        summarize(table, result.step_log.stats, slo)
    for record in records:  # derived as the record defines them
        if record.ttft is not None:
            assert record.ttft == record.first_token_time - record.arrival_time
        if record.tpot is not None:
            assert record.tpot == (record.e2e_latency - record.ttft) / (record.output_len - 1)


@settings(max_examples=60, **SETTINGS)
@given(workloads(), configs(), st.sampled_from([None, 0.5]), st.data())
def test_rows_of_a_table_read_and_summarize_as_the_list_of_their_records(requests, config,
                                                                         ttft_target, data):
    """A cluster replica's requests: a subset of the cluster's table, as its records."""
    slo = Slo(ttft=ttft_target) if ttft_target else None
    result = simulate(requests, config, make_policy("fcfs"), LinearStep(0.01, 0.0001))
    table = result.requests
    rows = sorted(data.draw(st.sets(st.integers(0, len(table) - 1))))
    subset = RecordSubset(table, np.array(rows, dtype=np.int64))
    listed = [table[i] for i in rows]
    assert list(subset) == listed and subset == listed and len(subset) == len(listed)
    if rows:
        assert subset[-1] == listed[-1] and subset[1:] == listed[1:]
    assert summarize(subset, result.step_log.stats, slo) == \
        summarize(listed, result.step_log.stats, slo)
    mine, theirs = columns_of(subset), columns_of(listed)
    for name in ("arrival_time", "status", "ttft", "ttft_steps", "tpot", "generated_tokens",
                 "prefix_hit_tokens", "max_token_gap"):
        assert _same(getattr(mine, name), getattr(theirs, name)), name


def test_a_preempting_run_fills_its_count_columns():
    requests = [Request(f"r{i}", 0.0, 40, 30) for i in range(6)]
    result = simulate(requests, EngineConfig(max_num_batched_tokens=512, block_size=4,
                                             num_blocks=30, watermark=0.0))
    preemptions = columns_of(result.requests).num_preemptions
    assert preemptions.sum() == result.summary["num_preemptions"] > 0
    assert sum(r.num_recomputed_tokens for r in result.requests) > 0


def test_records_take_a_tenth_of_the_memory_of_objects():
    n = 100_000
    workload = RequestColumns(np.arange(n, dtype=float), np.full(n, 100), np.full(n, 10))
    table = RecordTable(workload)
    held = sum(getattr(table, name).nbytes for name in RecordTable.__slots__
               if isinstance(getattr(table, name, None), np.ndarray)
               and getattr(table, name).flags.owndata)
    columns = sum(a.nbytes for a in (workload.arrival_time, workload.prompt_len,
                                     workload.output_len) if a.flags.owndata)
    assert held / n <= 64  # five times, a step count, two token counts, a status
    assert columns / n <= 16  # constant columns (priority, class) take nothing


def test_synthetic_and_clean_trace_workloads_are_columns(tmp_path):
    from kvsched.schema import SyntheticWorkload

    spec = SyntheticWorkload.model_validate({
        "kind": "synthetic", "num_requests": 50, "arrival": {"kind": "poisson", "rate": 2},
        "mix": [{"name": "a", "weight": 1, "prompt_len": 10, "output_len": 3},
                {"name": "b", "weight": 1, "prompt_len": 500, "output_len": 9,
                 "priority": 2}]})
    requests = build_requests(spec, seed=3)
    assert isinstance(requests, RequestColumns)
    listed = list(requests)
    assert requests == listed and [r.request_id for r in listed[:2]] == ["r0", "r1"]
    assert {(r.class_name, r.prompt_len, r.priority) for r in listed} == {("a", 10, 0),
                                                                         ("b", 500, 2)}
    assert all(math.isfinite(r.arrival_time) for r in listed)


def test_columns_refuse_what_a_request_refuses():
    with pytest.raises(ValueError, match="r1: prompt_len must be >= 1"):
        RequestColumns(np.zeros(3), np.array([5, 0, 5]), np.ones(3, dtype=int))
    with pytest.raises(ValueError, match="r2: arrival_time must be >= 0"):
        RequestColumns(np.array([0.0, 1.0, np.nan]), np.ones(3, dtype=int),
                       np.ones(3, dtype=int))


def test_columns_make_the_requests_the_dataclass_makes():
    """The loop makes their requests without Request's __init__ (`plain_requests`): each
    field, the defaults of those the columns do not hold included, as Request(...) sets it."""
    from kvsched.turns import column_requests

    columns = RequestColumns(np.array([0.5, 2.0]), np.array([3, 7]), np.array([5, 1]),
                             priority=np.array([2, -1]), class_codes=np.array([-1, 0]),
                             class_names=["long"], id_numbers=np.array([9, 4]))
    expected = [Request("r9", 0.5, 3, 5, 2), Request("r4", 2.0, 7, 1, -1, "long")]
    made = column_requests(columns, np.arange(2))
    assert made == expected == [columns[0], columns[1]]
    assert [hash(r) for r in made] == [hash(r) for r in expected]
    assert [repr(r) for r in made] == [repr(r) for r in expected]


@pytest.mark.parametrize("field, value, column", [
    ("num_preemptions", 2, "num_preemptions"),
    ("num_recomputed_tokens", 17, "num_recomputed_tokens"),
    ("num_swapped_blocks", 3, "num_swapped_blocks"),
    ("cached_tokens", 32, "cached_tokens"),
    ("end_reason", "cut short", None),
])
def test_a_rare_value_alone_reaches_the_record(field, value, column):
    """`put_record` reads the common values in C and passes the rare ones on only when one
    is there (`counted`): each rare value, set alone, is in the record."""
    from kvsched import EngineConfig as Config
    from kvsched.cluster.loop import put_record
    from kvsched.engine.replica import Engine
    from kvsched.request import Status
    from kvsched.sequence import Seq

    request = Request("r0", 0.0, 20, 4)
    table = RecordTable([request])
    seq = Seq.of(request, 0, 16)
    setattr(seq, field, value)
    put_record(table, 0, seq, Status.STARVED, Engine(Config(), make_policy("fcfs"),
                                                      LinearStep()))
    record = table[0]
    if column is None:
        assert table.reasons == {0: value}
    else:
        assert getattr(record, column) == value


@settings(max_examples=40, **SETTINGS)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=20), st.integers(1, 4),
       st.booleans())
def test_the_arrival_queue_reads_chunks_in_arrival_order(times, chunk, as_columns):
    """Across chunk boundaries (a chunk of 1..4 here, 16,384 in a run), arrivals come in
    time order, simultaneous ones in input order, and a released turn among them."""
    import kvsched.turns as turns

    times = [0, *times]  # r0 comes first; as a list, its next turn follows 3.5 after it
    requests = [Request(f"r{i}", float(t), 5, 2) for i, t in enumerate(times)]
    if not as_columns:
        requests.append(Request("turn", 0.0, 5, 2, after="r0", think_time=3.5))
    saved = turns._CHUNK
    turns._CHUNK = chunk
    try:
        queue = turns.ArrivalQueue(_as_columns(requests) if as_columns else requests)
        popped = []
        while queue.next_time() != math.inf:
            i, request = queue.pop()
            popped.append((request.arrival_time, i))
            if request.request_id == "r0":
                queue.ended("r0", 0.0)
    finally:
        turns._CHUNK = saved
    expected = sorted((float(t), i) for i, t in enumerate(times))
    if not as_columns:  # (no timed request arrives at 3.5: no tie to break)
        expected = sorted([*expected, (3.5, len(times))])
    assert popped == expected
