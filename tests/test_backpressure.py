"""The thrash metric and its backpressure signal (issue 4, cure 3): the monitor's window and
hysteresis, the `thrash_ratio` and `backpressure` columns, and what `pause` and `reserve` do.

Generated tokens of a step, as the engine counts them: one per decoding request plus one per
request whose (re)prefill completed or that swapped in. Without chunked prefill every prefill
completes in its step, so a row's generated tokens = `decode_tokens` (swap-ins included) +
`num_prefill_requests`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched import STEP_COLUMNS, EngineConfig, Request, RunResult, simulate
from kvsched.backpressure import Action, Backpressure, ThrashMonitor
from kvsched.errors import ScenarioError
from kvsched.scenario import load_scenario


def rows(result: RunResult) -> list[dict]:
    return [dict(zip(STEP_COLUMNS, row, strict=True)) for row in result.steps]


def row(result: RunResult, step: int) -> dict:
    (found,) = [r for r in rows(result) if r["step"] == step]
    return found


def signal_events(result: RunResult) -> list[tuple[int, str]]:
    return [(e[0], e[4]) for e in result.events if e[3] == "backpressure"]


def rec(result: RunResult, request_id: str):
    (record,) = [r for r in result.requests if r.request_id == request_id]
    return record


def four_in_eight_blocks() -> list[Request]:
    """4 requests of 16 + 40 tokens (4 blocks each for life) for a pool of 8 blocks."""
    # Step 0: all four prefill (1 block each); step 1: a 2nd block each, the pool is full.
    # Step 17: r0 needs a 3rd block and evicts r3, r1 takes the other freed block, r2 evicts
    # itself. Steps 17..39: r0 and r1 decode (2 tokens a step) and finish at t=40.
    # Step 40: r2 and r3 recompute 16 + 17 = 33 tokens each (66), 2 tokens produced; they
    # decode 2 tokens a step until t=63. Generated through step 40: 4 + 16 x 4 + 23 x 2 + 2.
    return [Request(f"r{i}", 0, 16, 40) for i in range(4)]


POOL8 = EngineConfig(num_blocks=8, watermark=0)


def busy_small_pool() -> list[Request]:
    """60 requests, one every 2 steps, in a pool of 30 blocks: it thrashes for a long time."""
    rng = np.random.default_rng(1)
    return [Request(f"r{i}", 2 * i, int(rng.integers(16, 100)), int(rng.integers(30, 120)))
            for i in range(60)]


POOL30 = EngineConfig(num_blocks=30, watermark=0)


# -- the monitor -------------------------------------------------------------------------------


def test_monitor_sums_the_last_window_steps():
    """Window 3: each ratio is recomputed / generated over the 3 most recent updates."""
    monitor = ThrashMonitor(Backpressure(window=3, threshold=0.5, release=0.2))
    ratios = [monitor.update(r, g) for r, g in [(0, 10), (6, 10), (10, 10), (0, 10), (0, 10),
                                                (0, 10), (3, 0)]]
    assert ratios == pytest.approx([0, 6 / 20, 16 / 30, 16 / 30, 10 / 30, 0, 3 / 20])


def test_monitor_raises_above_threshold_and_releases_below_release():
    """Up only above the threshold (0.5 is not), down only below the release (0.2 is not)."""
    monitor = ThrashMonitor(Backpressure(window=1, threshold=0.5, release=0.2))
    signal = []
    for recomputed in (5, 6, 3, 2, 1, 4):  # out of 10 generated: 0.5, 0.6, 0.3, 0.2, 0.1, 0.4
        monitor.update(recomputed, 10)
        signal.append(monitor.signal)
    assert signal == [False, True, True, True, False, False]


def test_monitor_divides_by_at_least_one_generated_token():
    """A window that generated nothing divides by 1: 3 recomputed tokens give ratio 3."""
    monitor = ThrashMonitor(Backpressure(window=2))
    assert monitor.update(0, 0) == 0.0
    assert monitor.update(3, 0) == 3.0
    assert monitor.signal


def test_clear_forgets_the_window_and_drops_the_signal():
    """After clear() old recomputation no longer counts."""
    monitor = ThrashMonitor(Backpressure(window=10))
    monitor.update(50, 10)
    assert monitor.signal
    monitor.clear()
    assert not monitor.signal
    assert monitor.update(0, 10) == 0.0  # 50 / 20 without the clear
    assert not monitor.signal


@pytest.mark.parametrize("kwargs", [{"threshold": 0.1, "release": 0.2}, {"window": 0},
                                    {"window": -5}, {"release": -0.1},
                                    {"act": "throttle"}])
def test_backpressure_refuses_bad_settings(kwargs):
    """release above threshold, a window under 1, a negative release, an unknown action."""
    with pytest.raises(ValueError):
        Backpressure(**kwargs)


def test_backpressure_accepts_the_edges_and_action_names():
    """release == threshold (even 0) is allowed; the action may be given by name."""
    assert Backpressure(threshold=0, release=0).release == 0
    assert Backpressure(threshold=0.3, release=0.3, act="reserve").act is Action.RESERVE


def test_a_scenario_with_release_above_threshold_is_refused(tmp_path: Path):
    """The same rule at the edge: a scenario file naming the field."""
    spec = {"name": "bp", "workload": {"kind": "inline", "requests": [
        {"prompt_len": 10, "output_len": 2}]}, "backpressure": {"threshold": 0.1,
                                                                 "release": 0.2}}
    path = tmp_path / "bp.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    with pytest.raises(ScenarioError, match="release"):
        load_scenario(path)


# -- the thrash_ratio and backpressure columns ---------------------------------------------


@pytest.mark.parametrize(("window", "expected"), [
    (100, {39: 0.0, 40: 66 / 116, 41: 66 / 118, 62: 66 / 160}),
    (5, {39: 0.0, 40: 66 / 10, 44: 66 / 10, 45: 0.0}),
])
def test_thrash_ratio_by_hand(window, expected):
    """66 recomputed at step 40 over the window's generated tokens (2 a step since step 17)."""
    result = simulate(four_in_eight_blocks(), POOL8, backpressure=Backpressure(window=window))
    assert {step: row(result, step)["thrash_ratio"] for step in expected} == pytest.approx(
        expected)
    assert result.summary["thrash_ratio_max"] == pytest.approx(expected[40])


def generated_per_row(result: RunResult) -> list[int]:
    """Tokens each step produced, from batches.csv and the admit/preempt events: a decode or
    a swap-in is one token; a prefill chunk is one only if it completes what its admission
    took on (`prefill N tokens` / `recompute N tokens`)."""
    assert result.batches is not None
    events: dict[int, list[tuple]] = defaultdict(list)
    for event in result.events:
        if event[3] in ("admit", "preempt"):
            events[event[0]].append(event)
    batches: dict[int, list[tuple]] = defaultdict(list)
    for batch in result.batches:
        batches[batch[0]].append(batch)
    left: dict[str, int] = {}  # request -> prefill tokens still to run since its admission
    produced = []
    for r in rows(result):
        for _, _, request_id, event, detail in events[r["step"]]:  # before the step runs
            if event == "admit":
                left[request_id] = int(detail.split()[1])
            else:
                left.pop(request_id, None)
        count = 0
        for _, _, request_id, phase, num_tokens in batches[r["step"]]:
            if phase == "prefill":
                left[request_id] -= num_tokens
                count += left[request_id] == 0
            else:
                count += 1
        produced.append(count)
    return produced


def window_ratios(result: RunResult, window: int, generated: list[int]) -> list[float]:
    """Each row's ratio recomputed from its columns (the window restarts at an idle clear):
    recomputed tokens plus tokens of KV swapped out and in, over generated tokens."""
    idle_clears = [e[0] for e in result.events
                   if e[3] == "backpressure" and e[4] == "off: the engine is idle"]
    ratios: list[float] = []
    recent: list[tuple[int, int]] = []
    previous_step = -1
    for r, tokens in zip(rows(result), generated, strict=True):
        if any(previous_step < s <= r["step"] for s in idle_clears):
            recent = []
        moved = (r["swapped_out_blocks"] + r["swapped_in_blocks"]) * result.config.block_size
        recent.append((r["recomputed_tokens"] + moved, tokens))
        recomputed = sum(x for x, _ in recent[-window:])
        generated_in_window = sum(g for _, g in recent[-window:])
        ratios.append(recomputed / max(1, generated_in_window))
        previous_step = r["step"]
    return ratios


@pytest.mark.parametrize("act", ["none", "pause", "reserve"])
@pytest.mark.parametrize("window", [1, 7, 100])
def test_thrash_ratio_column_is_the_window_of_the_rows(act, window):
    """thrash_ratio = recomputed / max(1, generated) over the last `window` rows."""
    result = simulate(busy_small_pool(), POOL30, record_batches=True,
                      backpressure=Backpressure(window=window, act=act))
    assert result.summary["recomputed_tokens"] > 0
    generated = generated_per_row(result)
    # Unchunked, every prefill completes: decodes (swap-ins included) + prefills.
    assert generated == [r["decode_tokens"] + r["num_prefill_requests"] for r in rows(result)]
    assert sum(generated) == result.summary["generated_tokens"]
    column = [r["thrash_ratio"] for r in rows(result)]
    assert column == pytest.approx(window_ratios(result, window, generated))


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_partial_prefill_chunks_are_not_generated_tokens(preemption):
    """With chunked prefill only a prefill's last chunk produces a token."""
    config = EngineConfig(num_blocks=30, watermark=0, chunked_prefill=True,
                          max_num_batched_tokens=48, preemption=preemption)
    result = simulate(busy_small_pool(), config, record_batches=True,
                      backpressure=Backpressure(window=20))
    assert result.summary["recomputed_tokens"] > 0  # preempted mid-prefill: recomputed
    generated = generated_per_row(result)
    assert sum(generated) == result.summary["generated_tokens"]
    assert sum(generated) < sum(r["decode_tokens"] + r["num_prefill_requests"]
                                for r in rows(result))  # some chunks were partial
    column = [r["thrash_ratio"] for r in rows(result)]
    assert column == pytest.approx(window_ratios(result, 20, generated))


@pytest.mark.parametrize("act", ["none", "pause", "reserve"])
def test_backpressure_column_follows_the_on_and_off_events(act):
    """After each step's events the signal from the events equals that row's column."""
    result = simulate(busy_small_pool(), POOL30, backpressure=Backpressure(act=act))
    events = [e for e in result.events if e[3] == "backpressure"]
    assert len(events) >= 2, "the pool must thrash for this test to mean anything"
    assert [e[4].split(":")[0] for e in events] == ["on", "off"] * (len(events) // 2)
    by_step = {r["step"]: r for r in rows(result)}
    for step, _, _, _, detail in events:
        if detail.startswith("on"):  # raised by this step's ratio
            assert by_step[step]["thrash_ratio"] > 0.2
        elif detail != "off: the engine is idle":  # released by this step's ratio
            assert by_step[step]["thrash_ratio"] < 0.1
    signal = False
    pending = list(events)
    for r in rows(result):
        while pending and pending[0][0] <= r["step"]:
            signal = pending.pop(0)[4].startswith("on")
        assert r["backpressure"] == int(signal), r["step"]
    assert result.summary["backpressure_steps"] == sum(r["backpressure"] for r in rows(result))


def test_signal_events_by_hand():
    """Window 5: on at step 40 (ratio 6.6), off at 45 when the recompute leaves the window."""
    result = simulate(four_in_eight_blocks(), POOL8, backpressure=Backpressure(window=5))
    assert signal_events(result) == [(40, "on: thrash ratio 6.6 > 0.2 over 5 steps"),
                                     (45, "off: thrash ratio 0 < 0.1")]
    assert [r["step"] for r in rows(result) if r["backpressure"]] == [40, 41, 42, 43, 44]


# -- acting on the signal -----------------------------------------------------------------------


def test_pause_admits_nothing_while_the_signal_is_up():
    """No admission, not even of an evicted request, between an `on` and the next `off`."""
    result = simulate(busy_small_pool(), POOL30, backpressure=Backpressure(act="pause"))
    signal = False
    admitted_while_up = preempted_while_up = 0
    for _, _, _, event, detail in result.events:
        if event == "backpressure":
            signal = detail.startswith("on")
        elif signal and event == "admit":
            admitted_while_up += 1
        elif signal and event == "preempt":
            preempted_while_up += 1
    assert admitted_while_up == 0
    assert preempted_while_up > 0  # evicted requests were waiting, and were held back
    previous = None
    for r in rows(result):
        if previous is not None and previous["backpressure"]:
            cleared = any(e[0] == r["step"] and e[4] == "off: the engine is idle"
                          for e in result.events if e[3] == "backpressure")
            assert r["num_admitted"] == 0 or cleared, r["step"]
        previous = r
    assert result.summary["num_finished"] == 60


def test_pause_holds_a_late_arrival_until_the_engine_is_idle():
    """`late` arrives at 50 while the signal is up: admitted at 50 without pause, at 63 with."""
    # The signal goes up at step 40 (66 / 116) and stays above 0.1 until r2 and r3 finish at
    # t=63; the engine is then idle, the signal is cleared and `late` runs at once.
    requests = four_in_eight_blocks() + [Request("late", 50, 16, 2)]
    free = simulate(requests, POOL8, backpressure=Backpressure(act="none"))
    assert rec(free, "late").first_scheduled_time == 50.0
    paused = simulate(requests, POOL8, backpressure=Backpressure(act="pause"))
    late = rec(paused, "late")
    assert (late.status, late.first_scheduled_time, late.ttft) == ("finished", 63.0, 14.0)
    assert signal_events(paused) == [
        (40, "on: thrash ratio 0.569 > 0.2 over 100 steps; admissions paused"),
        (63, "off: the engine is idle")]
    admit = [e[:4] for e in paused.events if e[2] == "late" and e[3] == "admit"]
    assert admit == [(63, 63.0, "late", "admit")]
    step63 = row(paused, 63)
    assert (step63["backpressure"], step63["thrash_ratio"], step63["num_admitted"]) == (0, 0, 1)


def test_an_idle_engine_ends_the_pause_instead_of_the_run():
    """Paused with nothing running and requests waiting: they still all finish."""
    # Everything at t=0 except a batch queued at 41 while paused; nothing else arrives.
    requests = four_in_eight_blocks() + [Request(f"w{i}", 41, 16, 3) for i in range(3)]
    result = simulate(requests, POOL8, backpressure=Backpressure(act="pause"))
    assert {r.status for r in result.requests} == {"finished"}
    assert [rec(result, f"w{i}").first_scheduled_time for i in range(3)] == [63.0] * 3
    assert (63, "off: the engine is idle") in signal_events(result)


def lifetime_blocks(record, block_size: int) -> int:
    return math.ceil((record.prompt_len + record.output_len - 1) / block_size)


def overcommitted_admissions(result: RunResult) -> tuple[int, int]:
    """(admissions while the signal is up, those whose lifetime blocks with those of every
    running request exceed the pool), replaying the events."""
    config = result.config
    life = {r.request_id: lifetime_blocks(r, config.block_size) for r in result.requests}
    holding: set[str] = set()
    signal = False
    admitted = over = 0
    for _, _, request_id, event, detail in result.events:
        if event == "backpressure":
            signal = detail.startswith("on")
        elif event == "admit":
            holding.add(request_id)
            if signal:
                admitted += 1
                over += sum(life[i] for i in holding) > config.num_blocks
        elif event in ("preempt", "finish"):
            holding.discard(request_id)
    return admitted, over


@pytest.mark.parametrize(("act", "overcommits"), [("reserve", False), ("none", True)])
def test_reserve_admits_only_what_the_pool_can_carry_to_the_end(act, overcommits):
    """While up, `reserve` admits only if every running life plus this one fits 30 blocks."""
    result = simulate(busy_small_pool(), POOL30, backpressure=Backpressure(act=act))
    admitted, over = overcommitted_admissions(result)
    assert admitted > 0  # it did admit while the signal was up
    assert (over > 0) is overcommits
    assert result.summary["num_finished"] == 60


@pytest.mark.parametrize(("window", "late_start"), [(100, 63.0), (5, 50.0)])
def test_reserve_holds_back_a_request_the_pool_could_not_finish(window, late_start):
    """`late` (2 blocks of life) waits while up: r2 and r3 hold 8 lifetime blocks of the 8."""
    # Window 100: the signal is up from step 40 to the end, `late` runs once r2 and r3 are
    # done (t=63). Window 5: the signal is down again at step 45, `late` runs on arrival.
    requests = four_in_eight_blocks() + [Request("late", 50, 16, 2)]
    result = simulate(requests, POOL8, backpressure=Backpressure(window=window, act="reserve"))
    # While the signal is down reserve does nothing: at step 0 all four are admitted, 16
    # lifetime blocks for a pool of 8, and the pool thrashes as without it.
    assert [e[0] for e in result.events if e[3] == "admit"][:4] == [0, 0, 0, 0]
    late = rec(result, "late")
    assert (late.first_scheduled_time, late.ttft) == (late_start, late_start + 1 - 50)
    assert row(result, late_start)["backpressure"] == (window == 100)


def test_swap_thrashing_raises_the_signal_too():
    """Under swap nothing is recomputed, but KV moved back and forth counts: the signal rises."""
    config = EngineConfig(num_blocks=30, watermark=0, preemption="swap")
    result = simulate(busy_small_pool(), config)
    assert result.summary["recomputed_tokens"] == 0 and result.summary["swapped_blocks"] > 0
    assert result.summary["backpressure_steps"] > 0
    assert result.summary["thrash_ratio_max"] > 0.2


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 5, 100]),
       st.lists(st.tuples(st.booleans(), st.integers(1, 250), st.integers(0, 5),
                          st.integers(0, 9)), min_size=1, max_size=30))
def test_skipping_quiet_steps_equals_updating_them_one_by_one(window, moves):
    """`skip` (what a decode stretch calls) leaves the monitor as repeated `update`s do."""
    jumped, stepped = ThrashMonitor(Backpressure(window=window)), ThrashMonitor(
        Backpressure(window=window))
    for quiet, steps, recomputed, generated in moves:
        if quiet and jumped.is_quiet:
            jumped.skip(steps, generated)
            for _ in range(steps):
                assert stepped.update(0, generated) == 0.0
        else:
            assert jumped.update(recomputed, generated) == stepped.update(recomputed, generated)
        assert (jumped.signal, jumped.is_quiet) == (stepped.signal, stepped.is_quiet)
    for _ in range(window + 1):  # the windows that follow see the same history
        assert jumped.update(1, 1) == stepped.update(1, 1)
