"""The report's readers: a request's phases from its events, the timeline's envelopes and
their packing, the incidents as intervals with their evidence (kvsched.report_view)."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvsched.cli import app
from kvsched.errors import KvschedError
from kvsched.report_view import envelope
from kvsched.report_view.envelope import (
    FACTOR,
    levels,
    pack,
    pack_span,
    pack_time,
    packed_levels,
    step_series,
)
from kvsched.report_view.phases import KINDS, request_phases
from kvsched.report_view.run_view import read_run
from kvsched.report_view.spans import incident_spans

REPO = Path(__file__).resolve().parent.parent


def run_folder(tmp: Path, scenario: str, *options: str) -> Path:
    done = CliRunner().invoke(app, ["run", str(REPO / "scenarios" / scenario), "--out",
                                    str(tmp), "--no-check", *options])
    assert done.exit_code == 0, done.output
    return tmp / Path(scenario).stem


@pytest.fixture(scope="module")
def pool60(tmp_path_factory) -> Path:
    return run_folder(tmp_path_factory.mktemp("full"), "pool60.yaml")


@pytest.fixture(scope="module")
def pool60_compact(tmp_path_factory) -> Path:
    return run_folder(tmp_path_factory.mktemp("compact"), "pool60.yaml", "--records", "compact")


def unpack(packed: dict) -> np.ndarray:
    """What report.js does with a packed column, in numpy."""
    raw = zlib.decompress(base64.b64decode(packed["data"]))
    n = packed["n"]
    if packed["type"] == "i32d":
        return np.cumsum(np.frombuffer(raw, "<i4").astype(np.int64)).astype(float)
    if packed["type"] == "f64s":
        return np.frombuffer(raw, np.uint8).reshape(8, n).T.copy().view("<f8").ravel()
    if packed["type"] == "f64":
        return np.frombuffer(raw, "<f8").copy()
    return np.frombuffer(raw, "<f4").astype(float)


def columns(**values):
    return {k: (np.array(v, dtype=float) if not isinstance(v[0] if v else 0, str) else v)
            for k, v in values.items()}


def phases_of(events, first_token, end=100.0, steps=None):
    requests = {"request_id": ["r0"], "first_token_time": np.array([first_token])}
    ev = {"step": np.array([e[0] for e in events], dtype=float),
          "time": np.array([e[1] for e in events], dtype=float),
          "request_id": ["r0"] * len(events), "event": [e[2] for e in events],
          "detail": [e[3] for e in events]}
    found = request_phases(requests, ev, end, steps)
    return [(KINDS[k], s, e) for k, s, e in zip(found.kind.tolist(), found.start.tolist(),
                                               found.end.tolist(), strict=True)]


def test_a_recomputed_request_is_queued_prefilled_decoded_preempted_and_recomputed():
    steps = {"step": np.arange(20.0), "time": np.arange(20.0), "duration": np.ones(20)}
    events = [(0, 0, "arrive", ""), (1, 1, "admit", "prefill 10 tokens"),
              (5, 5, "preempt", "recompute; 2 blocks freed"),
              (8, 8, "admit", "recompute 14 tokens"), (12, 12, "finish", "9 tokens")]
    assert phases_of(events, 2.0, steps=steps) == [
        ("queued", 0, 1), ("prefill", 1, 2), ("decode", 2, 5), ("preempted", 5, 8),
        ("recompute", 8, 9), ("decode", 9, 12)]


def test_a_swapped_request_waits_swapped_out_then_decodes():
    events = [(0, 0, "arrive", ""), (0, 0, "admit", "prefill 10 tokens"),
              (4, 4, "preempt", "swap; 2 blocks freed"), (4, 4, "swap_out", "2 blocks"),
              (7, 7, "swap_in", "2 blocks"), (9, 9, "finish", "5 tokens")]
    assert phases_of(events, 1.0) == [("queued", 0, 0), ("prefill", 0, 1), ("decode", 1, 4),
                                      ("swapped", 4, 7), ("decode", 7, 9)]


def test_starved_and_unfinished_requests_end_at_the_runs_end():
    assert phases_of([(0, 3, "arrive", "")], np.nan, end=50.0) == [("queued", 3, 50)]
    assert phases_of([(0, 3, "arrive", ""), (2, 6, "admit", "prefill 5 tokens")], 7.0,
                     end=50.0) == [("queued", 3, 6), ("prefill", 6, 7), ("decode", 7, 50)]


def test_every_finished_request_lives_from_arrival_to_finish_without_holes(pool60):
    run = read_run(pool60)
    for view in run.variants:
        req = view.requests
        found = request_phases(req, view.events, view.end_time, view.steps)
        assert len(found)
        for row in range(len(req["request_id"])):
            mine = np.flatnonzero(found.request == row)
            starts, ends = found.start[mine], found.end[mine]
            assert starts[0] == pytest.approx(req["arrival_time"][row], abs=1e-6)
            assert ends[-1] == pytest.approx(req["finish_time"][row])
            assert np.all(np.abs(starts[1:] - ends[:-1]) < 1e-6), (view.name, row)
            kinds = {KINDS[k] for k in found.kind[mine]}
            assert ("preempted" in kinds or "swapped" in kinds) == (
                req["num_preemptions"][row] > 0)


def test_compact_records_give_the_same_phases_and_spans(pool60, pool60_compact):
    full, compact = read_run(pool60), read_run(pool60_compact)
    for a, b in zip(full.variants, compact.variants, strict=True):
        pa = request_phases(a.requests, a.events, a.end_time, a.steps)
        pb = request_phases(b.requests, b.events, b.end_time, b.steps)
        for x, y in zip((pa.request, pa.kind, pa.start, pa.end),
                        (pb.request, pb.kind, pb.start, pb.end), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9)
        assert [(s.kind, s.note) for s in incident_spans(a)] == [
            (s.kind, s.note) for s in incident_spans(b)]


def test_envelopes_keep_every_extreme_and_every_preemption(pool60):
    view = read_run(pool60).variant("pool60")
    series = step_series(view.steps)
    found = levels(series)
    assert len(found) >= 2 and len(found[1]["t0"]) == -(-len(series["t0"]) // FACTOR)
    for level in found:
        assert level["preempted"].sum() == view.summary["num_preemptions"]
        for name in ("running", "waiting", "used", "tokens"):
            assert level[f"{name}.hi"].max() == series[name].max()
            assert level[f"{name}.lo"].min() == series[name].min()
        assert level["t0"][0] == series["t0"][0] and level["t1"][-1] == series["t1"][-1]


@pytest.mark.parametrize("values", [[0, 5, 3, 2 ** 29, -7], [0.5, 1e-9, np.nan, 3.25],
                                    [1.0, 2.0, 3.0]])
def test_packed_columns_read_back_as_written(values):
    values = np.array(values, dtype=float)
    np.testing.assert_array_equal(unpack(pack(values)), values)
    np.testing.assert_array_equal(unpack(pack_time(values)), values)
    np.testing.assert_allclose(unpack(pack_span(values)), values.astype(np.float32))


def test_a_run_over_the_detail_bound_embeds_its_first_level_under_it(pool60, monkeypatch):
    series = step_series(read_run(pool60).variant("pool60").steps)
    whole = packed_levels(series)
    assert whole["rows_per_point"] == 1 and whole["levels"][0]["t0"]["n"] == len(series["t0"])
    monkeypatch.setattr(envelope, "MAX_DETAIL_ROWS", len(series["t0"]) // FACTOR + 1)
    bounded = packed_levels(series)
    assert bounded["rows_per_point"] == FACTOR
    assert bounded["levels"] == whole["levels"][1:]
    np.testing.assert_array_equal(unpack(bounded["levels"][0]["running.hi"]),
                                  levels(series)[1]["running.hi"])


CHUNKED = """\
name: chunked
engine: {max_num_batched_tokens: 64, num_blocks: 200, block_size: 16, chunked_prefill: true}
workload: {kind: synthetic, num_requests: 6, arrival: {kind: all_at_once}, prompt_len: 200,
           output_len: 5}
"""


def test_with_batches_a_chunked_prefill_is_drawn_as_its_chunks(tmp_path):
    (tmp_path / "chunked.yaml").write_text(CHUNKED)
    done = CliRunner().invoke(app, ["run", str(tmp_path / "chunked.yaml"), "--out",
                                    str(tmp_path / "r"), "--record-batches"])
    assert done.exit_code == 0, done.output
    view = read_run(tmp_path / "r" / "chunked").variants[0]
    with_chunks = request_phases(view.requests, view.events, view.end_time, view.steps,
                                 view.batches)
    without = request_phases(view.requests, view.events, view.end_time, view.steps)
    prefill = KINDS.index("prefill")
    batches = view.batches
    for row in range(6):
        rid = view.requests["request_id"][row]
        steps = [k for k, (r, p) in enumerate(zip(batches["request_id"], batches["phase"],
                                                  strict=True)) if r == rid and p == "prefill"]
        assert sum(batches["num_tokens"][k] for k in steps) == 200
        chunks = (with_chunks.request == row) & (with_chunks.kind == prefill)
        assert np.count_nonzero(chunks) == len(steps) >= 4  # chunks of at most 64 tokens
        np.testing.assert_array_equal(with_chunks.start[chunks], batches["time"][steps])
        whole = (without.request == row) & (without.kind == prefill)
        assert np.count_nonzero(whole) == 1
        # the chunks lie within the whole prefill, one step each
        assert with_chunks.start[chunks].min() == without.start[whole][0]
        assert with_chunks.end[chunks].max() == pytest.approx(without.end[whole][0])


def test_pool60s_thrashing_is_an_interval_holding_its_preemptions(pool60):
    view = read_run(pool60).variant("pool60")
    spans = [s for s in incident_spans(view) if s.kind == "thrashing"]
    assert spans, "the diagnosis names thrashing; the report must place it"
    preempt_times = [t for t, e in zip(view.events["time"], view.events["event"], strict=True)
                     if e == "preempt"]
    marks = [m for s in spans for m in s.marks]
    assert all(m[2] == "preempt" for m in marks)
    assert all(any(s.start <= m[0] <= s.end for s in spans) for m in marks)
    assert len(marks) >= 0.9 * len(preempt_times)  # the thrashing is where they are
    assert view.summary["num_preemptions"] == len(preempt_times)
    for span in spans:
        assert {m[1] for m in span.marks} <= set(span.requests)


def test_head_of_line_is_the_heads_blocked_interval(tmp_path):
    view = read_run(run_folder(tmp_path, "budget128.yaml")).variant("budget128")
    hol = [s for s in incident_spans(view) if s.kind == "head_of_line"]
    assert hol and hol[0].requests[0] == "r10"
    assert hol[0].end == pytest.approx(view.end_time)
    starved = [s for s in incident_spans(view) if s.kind == "starvation"][0]
    assert len(starved.requests) == min(200, view.summary["num_starved"])


def test_a_missing_or_malformed_record_is_one_line_naming_it(pool60_compact, tmp_path):
    bad = tmp_path / "bad"
    import shutil

    shutil.copytree(pool60_compact, bad)
    steps = bad / "pool60" / "steps.csv"
    lines = steps.read_text().splitlines()
    header = lines[0].split(",")
    at = header.index("blocks_used")
    row = lines[5].split(",")
    row[at] = "lots"
    steps.write_text("\n".join([lines[0], *lines[1:5], ",".join(row), *lines[6:]]) + "\n")
    with pytest.raises(KvschedError, match=r"pool60/steps.csv: column blocks_used: expected "
                                           r"numbers, got 'lots'"):
        read_run(bad)
    (bad / "baseline" / "events.csv").unlink()
    with pytest.raises(KvschedError, match=r"baseline/events.csv: missing"):
        read_run(bad)
    with pytest.raises(KvschedError, match="not a run folder"):
        read_run(tmp_path)
