"""Workloads: inline lists, seeded synthetic generators, and trace files in every format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvsched.request import Request
from kvsched.runner import requests_of, run_variant
from kvsched.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
MOONCAKE = REPO / "scenarios" / "traces" / "mooncake_conversation_trace.jsonl"
AZURE_CONV = REPO / "scenarios" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def scenario_file(folder: Path, workload: dict, seed: int = 0) -> Path:
    """A one-variant scenario with this workload, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump({"name": "w", "seed": seed, "workload": workload}),
                    encoding="utf-8")
    return path


def requests_for(tmp_path: Path, workload: dict, seed: int = 0,
                 cli_seed: int | None = None) -> list[Request]:
    """The requests a scenario in tmp_path with this workload replays."""
    scenario = load_scenario(scenario_file(tmp_path, workload, seed), seed=cli_seed)
    return requests_of(scenario.variants[0])


def synthetic(n: int = 100, arrival: dict | None = None, **fields) -> dict:
    return {"kind": "synthetic", "num_requests": n,
            "arrival": arrival or {"kind": "poisson", "rate": 1.0},
            "prompt_len": 100, "output_len": 10, **fields}


def write_csv(path: Path, header: str, *rows: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def arrivals(requests: list[Request]) -> np.ndarray:
    return np.array([r.arrival_time for r in requests])


def gaps(requests: list[Request]) -> np.ndarray:
    return np.diff(arrivals(requests))


# -- inline ---------------------------------------------------------------------------


def test_inline_requests_keep_their_fields(tmp_path):
    """Inline requests carry id, arrival, lengths, priority and class as written."""
    requests = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"id": "chat", "arrival": 2.5, "prompt_len": 40, "output_len": 8, "priority": 3,
         "class": "short"},
        {"id": 7, "arrival": 4, "prompt_len": 900, "output_len": 2},
    ]})
    assert requests == [Request("chat", 2.5, 40, 8, 3, "short"), Request("7", 4.0, 900, 2, 0)]


def test_inline_requests_without_id_are_numbered_and_arrive_at_zero(tmp_path):
    """Missing ids become r0, r1, ... (by position); missing arrivals are 0."""
    requests = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"prompt_len": 5, "output_len": 1}, {"prompt_len": 6, "output_len": 1}]})
    assert [(r.request_id, r.arrival_time, r.class_name) for r in requests] == [
        ("r0", 0.0, None), ("r1", 0.0, None)]


# -- synthetic: arrivals ----------------------------------------------------------------


def test_all_at_once_arrivals(tmp_path):
    """all_at_once: `num_requests` requests, all at `at` (0 by default)."""
    assert set(arrivals(requests_for(tmp_path, synthetic(7, {"kind": "all_at_once"})))) == {0.0}
    late = requests_for(tmp_path, synthetic(7, {"kind": "all_at_once", "at": 5}))
    assert len(late) == 7 and set(arrivals(late)) == {5.0}


def test_fixed_arrivals_with_a_count(tmp_path):
    """fixed {interval}: the first request at 0, then one every `interval`."""
    requests = requests_for(tmp_path, synthetic(4, {"kind": "fixed", "interval": 0.5}))
    assert list(arrivals(requests)) == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert [r.request_id for r in requests] == ["r0", "r1", "r2", "r3"]


def test_fixed_arrivals_over_a_duration(tmp_path):
    """A duration instead of a count: every arrival in [0, duration)."""
    workload = synthetic(arrival={"kind": "fixed", "interval": 2})
    del workload["num_requests"]
    workload["duration"] = 100
    requests = requests_for(tmp_path, workload)
    assert len(requests) == 50
    assert arrivals(requests).max() == pytest.approx(98)


def test_poisson_arrivals_over_a_duration(tmp_path):
    """poisson over a duration: all arrivals inside it, about rate x duration of them."""
    workload = synthetic(arrival={"kind": "poisson", "rate": 5})
    del workload["num_requests"]
    workload["duration"] = 200
    times = arrivals(requests_for(tmp_path, workload))
    assert times.min() == 0 and times.max() < 200
    assert np.all(np.diff(times) >= 0)
    assert 850 < len(times) < 1150  # 1000 expected; sd about 32


def test_poisson_mean_rate_is_right_over_many_requests(tmp_path):
    """poisson {rate: 4}: the mean gap over 5000 requests is 1/4 within 5%."""
    mean_gap = gaps(requests_for(tmp_path, synthetic(5000, {"kind": "poisson", "rate": 4}))).mean()
    assert mean_gap == pytest.approx(0.25, rel=0.05)


def test_poisson_gaps_have_cv_near_one(tmp_path):
    """Exponential gaps: coefficient of variation about 1."""
    g = gaps(requests_for(tmp_path, synthetic(5000, {"kind": "poisson", "rate": 4})))
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.1)


def test_gamma_keeps_the_rate_and_is_burstier_than_poisson(tmp_path):
    """gamma {rate, cv: 3}: the same mean rate as poisson, gaps far more variable (bursts)."""
    g = gaps(requests_for(tmp_path, synthetic(5000, {"kind": "gamma", "rate": 4, "cv": 3})))
    p = gaps(requests_for(tmp_path, synthetic(5000, {"kind": "poisson", "rate": 4})))
    assert g.mean() == pytest.approx(0.25, rel=0.15)
    assert g.std() / g.mean() > 2
    assert g.std() / g.mean() > 2 * (p.std() / p.mean())


def test_gamma_with_cv_below_one_is_smoother_than_poisson(tmp_path):
    """gamma with cv 0.2: nearly regular gaps."""
    g = gaps(requests_for(tmp_path, synthetic(3000, {"kind": "gamma", "rate": 2, "cv": 0.2})))
    assert g.std() / g.mean() == pytest.approx(0.2, abs=0.05)


# -- synthetic: lengths -----------------------------------------------------------------


def test_constant_lengths_as_number_or_mapping(tmp_path):
    """A number is shorthand for {kind: constant, value: N}."""
    requests = requests_for(tmp_path, synthetic(
        20, prompt_len=33, output_len={"kind": "constant", "value": 7}))
    assert {(r.prompt_len, r.output_len) for r in requests} == {(33, 7)}


def test_uniform_lengths_cover_both_ends(tmp_path):
    """uniform {low, high}: integers from low to high, both included."""
    requests = requests_for(tmp_path, synthetic(
        2000, prompt_len={"kind": "uniform", "low": 10, "high": 14}))
    assert {r.prompt_len for r in requests} == {10, 11, 12, 13, 14}


def test_lognormal_lengths_have_the_median_and_stay_clipped(tmp_path):
    """lognormal {median, sigma, min, max}: median about right, all within [min, max]."""
    requests = requests_for(tmp_path, synthetic(4000, prompt_len={
        "kind": "lognormal", "median": 200, "sigma": 1.0, "min": 20, "max": 2000}))
    lengths = np.array([r.prompt_len for r in requests])
    assert np.median(lengths) == pytest.approx(200, rel=0.1)
    assert lengths.min() >= 20 and lengths.max() <= 2000
    assert lengths.min() == 20 and lengths.max() == 2000  # sigma 1 reaches both clips


def test_empirical_lengths_sample_a_trace_column(tmp_path):
    """empirical {path, column}: values drawn from that column, path relative to the file."""
    write_csv(tmp_path / "data" / "lengths.csv", "tokens,other", "11,0", "222,0", "3333,0")
    requests = requests_for(tmp_path, synthetic(300, prompt_len={
        "kind": "empirical", "path": "data/lengths.csv", "column": "tokens"}))
    assert {r.prompt_len for r in requests} == {11, 222, 3333}


def test_weighted_mix_labels_classes_and_draws_their_lengths(tmp_path):
    """mix: shares follow the weights; each class has its lengths, priority and label."""
    requests = requests_for(tmp_path, {
        "kind": "synthetic", "num_requests": 4000, "arrival": {"kind": "poisson", "rate": 1},
        "mix": [
            {"name": "short", "weight": 0.9, "prompt_len": {"kind": "uniform", "low": 10,
                                                            "high": 100}, "output_len": 20},
            {"name": "long", "weight": 0.1, "prompt_len": {"kind": "uniform", "low": 1000,
                                                           "high": 2000}, "output_len": 5,
             "priority": 2},
        ]})
    short = [r for r in requests if r.class_name == "short"]
    long = [r for r in requests if r.class_name == "long"]
    assert len(short) + len(long) == 4000
    assert len(long) / 4000 == pytest.approx(0.1, abs=0.02)
    assert all(10 <= r.prompt_len <= 100 and r.output_len == 20 and r.priority == 0
               for r in short)
    assert all(1000 <= r.prompt_len <= 2000 and r.output_len == 5 and r.priority == 2
               for r in long)


def test_mix_class_labels_reach_the_records_and_summary(tmp_path):
    """Class names are carried into each request record and give per-class summary keys."""
    path = scenario_file(tmp_path, {
        "kind": "synthetic", "num_requests": 40, "arrival": {"kind": "all_at_once"},
        "mix": [{"name": "chat", "weight": 3, "prompt_len": 20, "output_len": 2},
                {"name": "doc", "weight": 1, "prompt_len": 300, "output_len": 2}]})
    result = run_variant(load_scenario(path).variants[0])
    classes = {r.request_id: r.class_name for r in result.requests}
    assert set(classes.values()) == {"chat", "doc"}
    doc = sum(name == "doc" for name in classes.values())
    assert result.summary["num_requests_doc"] == doc
    assert result.summary["num_requests_chat"] == 40 - doc


# -- seeds ------------------------------------------------------------------------------


MIXED = {"kind": "synthetic", "num_requests": 200, "arrival": {"kind": "gamma", "rate": 2,
                                                                "cv": 2},
         "mix": [{"name": "a", "weight": 1, "prompt_len": {"kind": "lognormal", "median": 50,
                                                           "sigma": 1}, "output_len": 5},
                 {"name": "b", "weight": 1, "prompt_len": {"kind": "uniform", "low": 1,
                                                           "high": 999}, "output_len": 5}]}


def test_same_seed_gives_the_same_requests(tmp_path):
    """Loading twice with the same seed draws identical requests."""
    assert requests_for(tmp_path / "one", MIXED, seed=4) == requests_for(tmp_path / "two",
                                                                         MIXED, seed=4)


def test_another_seed_gives_other_requests(tmp_path):
    """Another seed (in the file or from --seed) draws other arrivals and lengths."""
    base = requests_for(tmp_path, MIXED, seed=4)
    assert requests_for(tmp_path, MIXED, seed=5) != base
    assert requests_for(tmp_path, MIXED, seed=4, cli_seed=5) == requests_for(tmp_path, MIXED,
                                                                            seed=5)
    other = requests_for(tmp_path, MIXED, seed=5)
    assert not np.array_equal(arrivals(other), arrivals(base))
    assert [r.prompt_len for r in other] != [r.prompt_len for r in base]


# -- traces -----------------------------------------------------------------------------


def trace(path: str, **options) -> dict:
    return {"kind": "trace", "path": path, **options}


def test_kvsched_trace_with_optional_columns(tmp_path):
    """format kvsched reads priority, class and request_id when the file has them."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,priority,class,request_id",
              "0,10,5,1,short,a", "1.5,900,7,0,long,b")
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched"))
    assert requests == [Request("a", 0.0, 10, 5, 1, "short"), Request("b", 1.5, 900, 7, 0, "long")]


def test_traces_and_inline_requests_carry_a_session(tmp_path):
    """A kvsched trace's session column, columns.session, and inline `session` (for the
    session router); empty cells and absent columns give None."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len,session",
              "0,10,5,chat1", "1,10,5,", "2,10,5,7")
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched"))
    assert [r.session for r in requests] == ["chat1", None, "7"]
    write_csv(tmp_path / "o.csv", "t,p,o,conv", "0,10,5,x")
    columns = {"arrival_time": "t", "prompt_len": "p", "output_len": "o", "session": "conv"}
    assert requests_for(tmp_path, trace("o.csv", columns=columns))[0].session == "x"
    inline = requests_for(tmp_path, {"kind": "inline", "requests": [
        {"prompt_len": 3, "output_len": 2, "session": 42}, {"prompt_len": 3, "output_len": 2}]})
    assert [r.session for r in inline] == ["42", None]


def test_kvsched_trace_without_optional_columns(tmp_path):
    """Without the optional columns: ids r0.., priority 0, no class."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", "0,10,5", "2,20,6")
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched"))
    assert requests == [Request("r0", 0.0, 10, 5), Request("r1", 2.0, 20, 6)]


def test_azure_trace_turns_timestamps_into_seconds_from_the_first(tmp_path):
    """format azure: TIMESTAMP datetimes become seconds since the first row."""
    write_csv(tmp_path / "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens",
              "2023-11-16 18:15:46.5000000,374,44",
              "2023-11-16 18:15:48.0000000,396,109",
              "2023-11-16 18:16:46.5000000,10,1")
    requests = requests_for(tmp_path, trace("az.csv", format="azure"))
    assert list(arrivals(requests)) == pytest.approx([0.0, 1.5, 60.0])
    assert [(r.prompt_len, r.output_len) for r in requests] == [(374, 44), (396, 109), (10, 1)]


def test_mooncake_jsonl_trace_has_millisecond_timestamps(tmp_path):
    """format mooncake: JSONL, `timestamp` in ms, input_length/output_length (hash_ids are
    optional: tests/test_workload_prefix.py)."""
    lines = [{"timestamp": 0, "input_length": 6758, "output_length": 500},
             {"timestamp": 1500, "input_length": 2290, "output_length": 3}]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    requests = requests_for(tmp_path, trace("mc.jsonl", format="mooncake"))
    assert requests == [Request("r0", 0.0, 6758, 500), Request("r1", 1.5, 2290, 3)]


def test_vidur_trace(tmp_path):
    """format vidur: arrived_at (seconds), num_prefill_tokens, num_decode_tokens."""
    write_csv(tmp_path / "v.csv", "arrived_at,num_prefill_tokens,num_decode_tokens",
              "0.0,374,44", "4.314579,396,109")
    requests = requests_for(tmp_path, trace("v.csv", format="vidur"))
    assert requests == [Request("r0", 0.0, 374, 44), Request("r1", 4.314579, 396, 109)]


@pytest.mark.parametrize("unit, stamps, expected", [
    ("s", ["0", "2.5"], [0.0, 2.5]),
    ("ms", ["0", "2500"], [0.0, 2.5]),
    ("us", ["0", "2500000"], [0.0, 2.5]),
    ("datetime", ["2024-01-01T10:00:00.000", "2024-01-01T10:00:02.500"], [0.0, 2.5]),
])
def test_columns_mapping_with_arrival_unit(tmp_path, unit, stamps, expected):
    """`columns:` maps any file's columns; arrival_unit scales times to seconds."""
    write_csv(tmp_path / "any.csv", "when,in,out,tier,kind,uid",
              f"{stamps[0]},100,10,2,x,first", f"{stamps[1]},200,20,0,y,second")
    columns = {"arrival_time": "when", "prompt_len": "in", "output_len": "out",
               "priority": "tier", "class": "kind", "request_id": "uid", "arrival_unit": unit}
    requests = requests_for(tmp_path, trace("any.csv", columns=columns))
    assert list(arrivals(requests)) == pytest.approx(expected)
    assert [(r.request_id, r.prompt_len, r.output_len, r.priority, r.class_name)
            for r in requests] == [("first", 100, 10, 2, "x"), ("second", 200, 20, 0, "y")]


def test_numeric_arrival_units_are_not_shifted_to_the_first_row(tmp_path):
    """Times in s/ms/us are kept as they are: a trace starting at 10 s replays from 10."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", "10,5,1", "12,5,1")
    assert list(arrivals(requests_for(tmp_path, trace("t.csv", format="kvsched")))) == [10, 12]


def test_azure_timestamps_with_and_without_fractional_seconds(tmp_path):
    """A datetime column mixing whole and fractional seconds parses (both are ISO 8601)."""
    write_csv(tmp_path / "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens",
              "2023-11-16 18:15:46,374,44", "2023-11-16 18:15:47.25,396,109")
    requests = requests_for(tmp_path, trace("az.csv", format="azure"))
    assert list(arrivals(requests)) == pytest.approx([0.0, 1.25])


def test_columns_mapping_with_only_the_required_columns(tmp_path):
    """A minimal `columns:` mapping (times in seconds by default) needs just three columns."""
    write_csv(tmp_path / "any.csv", "t,p,o", "0,5,1", "3,6,2")
    requests = requests_for(tmp_path, trace("any.csv", columns={
        "arrival_time": "t", "prompt_len": "p", "output_len": "o"}))
    assert requests == [Request("r0", 0.0, 5, 1), Request("r1", 3.0, 6, 2)]


TEN_ROWS = [f"{t},{10 + t},1" for t in range(10)]  # arrivals 0..9, prompt 10..19


def test_trace_limit_keeps_the_first_rows(tmp_path):
    """limit N replays the first N rows."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", *TEN_ROWS)
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched", limit=3))
    assert [r.prompt_len for r in requests] == [10, 11, 12]


def test_trace_window_start_and_duration(tmp_path):
    """start/duration keep [start, start+duration) and shift arrivals to begin at 0."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", *TEN_ROWS)
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched", start=3, duration=4))
    assert [r.prompt_len for r in requests] == [13, 14, 15, 16]
    assert list(arrivals(requests)) == pytest.approx([0, 1, 2, 3])


def test_trace_window_then_limit(tmp_path):
    """limit counts rows inside the window."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", *TEN_ROWS)
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched", start=5, limit=2))
    assert [r.prompt_len for r in requests] == [15, 16]


@pytest.mark.parametrize("scale, expected", [(0.5, [0, 0.5, 1.0]), (2, [0, 2, 4])])
def test_trace_time_scale(tmp_path, scale, expected):
    """time_scale multiplies arrival times (0.5 replays twice as fast)."""
    write_csv(tmp_path / "t.csv", "arrival_time,prompt_len,output_len", *TEN_ROWS[:3])
    requests = requests_for(tmp_path, trace("t.csv", format="kvsched", time_scale=scale))
    assert list(arrivals(requests)) == pytest.approx(expected)


def test_trace_path_is_relative_to_the_scenario_file(tmp_path, monkeypatch):
    """A relative trace path resolves against the scenario's folder, not the working dir."""
    write_csv(tmp_path / "lab" / "traces" / "t.csv", "arrival_time,prompt_len,output_len",
              "0,10,5")
    path = scenario_file(tmp_path / "lab", trace("traces/t.csv", format="kvsched"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    scenario = load_scenario(Path("..") / "lab" / path.name)
    assert requests_of(scenario.variants[0]) == [Request("r0", 0.0, 10, 5)]


def test_shipped_azure_conversation_trace(tmp_path):
    """The shipped Azure 2023 copy: one hour, 19,366 requests, the 14,050-token prompt in it."""
    requests = requests_for(tmp_path, trace(str(AZURE_CONV), format="azure"))
    assert len(requests) == 19366
    assert (requests[0].arrival_time, requests[0].prompt_len, requests[0].output_len) == (
        0.0, 374, 44)
    assert max(r.prompt_len for r in requests) == 14050
    assert 3500 < requests[-1].arrival_time <= 3600


def test_real_mooncake_trace_first_hundred(tmp_path):
    """The shipped Mooncake conversation trace reads as format mooncake (limit 100)."""
    requests = requests_for(tmp_path, trace(str(MOONCAKE), format="mooncake", limit=100))
    assert len(requests) == 100
    assert (requests[0].prompt_len, requests[0].output_len) == (6758, 500)
    assert requests[0].arrival_time == 0
    assert np.all(np.diff(arrivals(requests)) >= 0)
