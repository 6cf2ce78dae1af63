"""Pictures of a past run, drawn from the records it wrote (PNG, matplotlib's Agg), and
what the pictures of sweeps (`kvsched.plots.sweep`) and capacity searches
(`kvsched.plots.capacity`) share with them.

A run folder `<out>/<scenario>/` gets `timeline-<variant>.png`, `ttft.png` and `latency.png`.
The series are prepared by pure functions (`timeline_series`, `ttft_cdf`, `ttft_share`,
`latency_points`: a DataFrame in, a small DataFrame out) and the drawing functions only lay
them out. Figures are built with `matplotlib.figure.Figure`, never pyplot: no display, no
global figure registry, and the caller's matplotlib backend is left alone. The engine never
imports this module. `kvsched plot FOLDER` redraws any of the three kinds of folder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kvsched.errors import KvschedError
from kvsched.paths import read_json
from kvsched.report import fmt

COLORS = {
    "decode": "#4e79a7",
    "prefill": "#f28e2b",
    "recomputed": "#e15759",
    "peak": "#9a9a9a",
    "blocks": "#76b7b2",
    "waiting": "#b07aa1",
    "running": "#59a14f",
    "preempt": "#9c0d38",
    "backpressure": "#bab0ac",
    "limit": "#222222",
    "swap": "#edc948",
    "thrash": "#e15759",
    "cached": "#499894",
    "arrived": "#9a9a9a",
    "finished": "#59a14f",
    "starved": "#9c0d38",
}
"""What a colour means in a timeline, the same in every timeline."""

VARIANT_COLORS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
                  "#000000", "#8c564b")
"""One colour per variant, in the order of the run's summary.csv: the same variant has the
same colour in ttft.png and latency.png (and the n-th line of sweep.png the n-th colour)."""

LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (1, 1)), (0, (8, 2)), "-")
"""The n-th variant's line style in ttft.png: identical distributions (pool60 and
pool60_swap) stay visible on top of each other."""

LINE_MARKERS = ("o", "s", "^", "D", "v", "P", "*", "X")
"""The n-th line of sweep.png: a marker too, so that lines lying on each other stay visible."""

APART_MARKERS = {"starved": "x", "rejected": "+", "unfinished": "^"}
"""How a request without a first token is drawn in latency.png, by status."""

MAX_POINTS = 2000
"""Timelines longer than this many steps are bucketed down to at most this many points."""

DPI = 100
WIDE_RANGE = 100.0  # a log axis once the values span more than two decades

STEP_COLUMNS = ("step", "time", "prefill_tokens", "recomputed_tokens", "decode_tokens",
                "budget_used", "blocks_used", "num_waiting", "num_running", "num_preempted")
REQUEST_COLUMNS = ("request_id", "prompt_len", "class", "status", "ttft")


# -- reading the records ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VariantRecords:
    """One variant's records as read back from `<run>/<variant>/`."""

    scenario: str
    name: str
    time_unit: str  # "steps" or "s"
    max_num_batched_tokens: int
    num_blocks: int
    watermark_blocks: int
    steps: pd.DataFrame | None  # None: the run wrote no steps.csv (--records summary)
    requests: pd.DataFrame
    ttft_slo: float | None = None  # the variant's slo.ttft, drawn as a reference line
    duration: float | None = None  # the run's end in its clock (summary `duration`)
    outcomes: tuple[tuple[str, int], ...] = ()  # (status, requests): finished, starved...
    incidents: tuple[str, ...] = ()  # the diagnosis' kinds (summary `incidents`)


def read_csv(path: Path, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A record CSV, or a one-line error naming the file and what is wrong with it."""
    if not path.is_file():
        raise KvschedError(f"{path}: missing")
    try:
        frame = pd.read_csv(path, dtype={"class": str, "status": str, "variant": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise KvschedError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise KvschedError(f"{path}: missing column(s) {', '.join(missing)}")
    return frame


def read_variant(folder: Path) -> VariantRecords:
    """The records of one variant folder (run.json, steps.csv, requests.csv)."""
    run = read_json(folder / "run.json")
    try:
        engine = run["resolved"]["engine"]
        limits = (int(engine["max_num_batched_tokens"]), int(engine["num_blocks"]),
                  int(run["watermark_blocks"]))
        time_unit = str(run["time_unit"])
    except (KeyError, TypeError, ValueError) as exc:
        raise KvschedError(f"{folder / 'run.json'}: no usable field {exc}") from None
    requests = read_csv(folder / "requests.csv", REQUEST_COLUMNS)
    requests["class"] = requests["class"].fillna("")
    slo = run["resolved"].get("slo") or {}
    ttft_slo = float(slo["ttft"]) if isinstance(slo, dict) and slo.get("ttft") else None
    duration: float | None = None
    incidents: tuple[str, ...] = ()
    if (folder / "summary.json").is_file():
        summary = read_json(folder / "summary.json")
        value = summary.get("duration")
        duration = float(value) if isinstance(value, int | float) else None
        incidents = tuple(str(i["kind"]) for i in summary.get("incidents") or ()
                          if isinstance(i, dict) and "kind" in i)
    # the folder may be a staging copy (`run --plot`): the scenario's name is in run.json
    steps = (None if run.get("records") == "summary"  # the run wrote no steps.csv
             else expand_compact(read_csv(folder / "steps.csv", STEP_COLUMNS)))
    return VariantRecords(str(run.get("scenario", folder.parent.name)), folder.name, time_unit,
                          *limits, steps, requests, ttft_slo, duration,
                          request_outcomes(requests), incidents)


OUTCOME_ORDER = ("finished", "unfinished", "starved", "rejected")
"""requests.csv's statuses, in the order the requests panel stacks them."""

OUTCOME_COLORS = {"finished": COLORS["finished"], "unfinished": "#bab0ac",
                  "starved": COLORS["starved"], "rejected": "#f28e2b"}


def request_outcomes(requests: pd.DataFrame) -> tuple[tuple[str, int], ...]:
    """How many requests ended in each status (requests.csv's `status`), finished first,
    then unfinished, starved, rejected, then any other; every request counted once."""
    counts = requests["status"].fillna("unknown").astype(str).value_counts()
    order = [s for s in OUTCOME_ORDER if s in counts.index] + sorted(
        s for s in counts.index if s not in OUTCOME_ORDER)
    return tuple((status, int(counts[status])) for status in order)


SPREAD = ("prefill_tokens", "decode_tokens", "recomputed_tokens", "budget_used",
          "num_preempted", "num_admitted", "num_finished", "swapped_out_blocks",
          "swapped_in_blocks", "evicted_blocks")
"""Columns a compact stretch row sums over its steps: spread evenly when it is expanded."""


def expand_compact(steps: pd.DataFrame) -> pd.DataFrame:
    """`--records compact` rows (a `num_steps` column) as one row per step, for drawing:
    a stretch's steps share its values, its sums spread evenly, its time split evenly."""
    if "num_steps" not in steps.columns:
        return steps
    counts = steps["num_steps"].to_numpy(dtype=np.int64)
    rows = steps.loc[steps.index.repeat(counts)].reset_index(drop=True)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    per = np.repeat(counts, counts).astype(float)
    rows["step"] = rows["step"] + offset
    rows["duration"] = rows["duration"] / per
    rows["time"] = rows["time"] + offset * rows["duration"]
    for name in SPREAD:
        if name in rows.columns:
            rows[name] = rows[name] / per
    return rows.drop(columns="num_steps")


def read_run(folder: Path) -> list[VariantRecords]:
    """A run folder's variants, in the order of its summary.csv."""
    summary = read_csv(folder / "summary.csv", ("variant",))
    variants = [read_variant(folder / name) for name in summary["variant"]]
    if not variants:
        raise KvschedError(f"{folder / 'summary.csv'}: no variants")
    return variants


# -- preparing the series (pure) -----------------------------------------------------------


def timeline_series(steps: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Per-step records bucketed into at most `max_points` rows of consecutive steps.

    Columns: `step` and `time` where the bucket starts, `num_steps` in it; token counts and
    `num_preempted` summed (totals are kept); `peak_tokens` (the largest `budget_used`),
    `blocks_used`, `num_waiting`, `num_running` and, when recorded, `backpressure` and
    `thrash_ratio` (and `cached_blocks`) as the bucket's maximum (spikes are kept); swapped
    (and evicted) blocks, when recorded, summed. With `max_points` >= the steps, one row per step.
    """
    if max_points < 1:
        raise ValueError("max_points must be >= 1")
    num_rows = len(steps)
    width = max(1, -(-num_rows // max_points))  # ceiling division
    starts = np.arange(0, num_rows, width)
    sums = ["prefill_tokens", "recomputed_tokens", "decode_tokens", "num_preempted"]
    sums += [c for c in ("swapped_out_blocks", "swapped_in_blocks", "evicted_blocks")
             if c in steps.columns]
    peaks = ["blocks_used", "num_waiting", "num_running"]
    peaks += [c for c in ("backpressure", "thrash_ratio", "cached_blocks")
              if c in steps.columns]
    series = {
        "step": steps["step"].to_numpy()[starts],
        "time": steps["time"].to_numpy()[starts],
        "num_steps": np.diff(np.append(starts, num_rows)),
    }
    if num_rows:
        for column in sums:
            series[column] = np.add.reduceat(steps[column].to_numpy(), starts)
        series["peak_tokens"] = np.maximum.reduceat(steps["budget_used"].to_numpy(), starts)
        for column in peaks:
            series[column] = np.maximum.reduceat(steps[column].to_numpy(), starts)
    else:
        series |= {column: np.zeros(0, dtype=int) for column in sums + ["peak_tokens"] + peaks}
    return pd.DataFrame(series)


def ttft_share(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT against the share of *all* the requests that had their first token by then:
    columns `ttft` (sorted) and `share` (k/n for the k-th smallest of n requests). The last
    share is the part of the requests that got a token at all: a variant that starves most
    of its requests ends low, however fast it served the few."""
    values = np.sort(requests["ttft"].dropna().to_numpy(dtype=float))
    return pd.DataFrame({"ttft": values,
                         "share": np.arange(1, len(values) + 1) / max(len(requests), 1)})


def ttft_cdf(requests: pd.DataFrame) -> pd.DataFrame:
    """The empirical CDF of TTFT over the requests that got a first token.

    Columns `ttft` (sorted) and `fraction` (k/n for the k-th smallest; the last row is 1).
    Requests without a first token (starved, rejected) are not in it: count them apart.
    """
    values = np.sort(requests["ttft"].dropna().to_numpy(dtype=float))
    return pd.DataFrame({"ttft": values,
                         "fraction": np.arange(1, len(values) + 1) / max(len(values), 1)})


@dataclass(frozen=True, slots=True)
class LatencyPoints:
    """Requests with a first token (`served`: prompt_len, ttft) and those without (`apart`:
    prompt_len, status), which have no TTFT to draw and are shown apart."""

    served: pd.DataFrame
    apart: pd.DataFrame


def latency_points(requests: pd.DataFrame) -> LatencyPoints:
    """Per request, TTFT against prompt length; requests without a first token apart."""
    has_ttft = requests["ttft"].notna()
    served = requests.loc[has_ttft, ["request_id", "prompt_len", "ttft"]]
    apart = requests.loc[~has_ttft, ["request_id", "prompt_len", "status"]]
    return LatencyPoints(served.reset_index(drop=True), apart.reset_index(drop=True))


def class_names(frames: list[pd.DataFrame]) -> list[str]:
    """The request classes found in any of the frames, sorted; empty when none carry one."""
    names = set().union(*(set(frame["class"].dropna().astype(str)) for frame in frames))
    return sorted(names - {""})


def wide_range(values: Any) -> bool:
    """Whether positive values span more than two decades (then a log axis helps)."""
    data = np.asarray(values, dtype=float)
    data = data[np.isfinite(data)]
    if data.size == 0 or data.min() <= 0:
        return False
    return bool(data.max() / data.min() > WIDE_RANGE)


def _numeric(values: tuple[Any, ...]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _value_key(value: Any) -> Any:
    """Sweep values compared across the CSV round trip (1 and 1.0 are the same point)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _unit(time_unit: str) -> str:
    return "steps" if time_unit == "steps" else "s"


def _units(time_units: Any) -> str:
    """The unit for an axis label; variants on different clocks are said to be."""
    units = sorted({_unit(str(unit)) for unit in time_units}) or ["steps"]
    return units[0] if len(units) == 1 else f"{' or '.join(units)}, per variant's clock"


def _per(time_unit: str) -> str:
    return "step" if time_unit == "steps" else "s"


# -- drawing -------------------------------------------------------------------------------


def draw_timeline(records: VariantRecords, max_points: int = MAX_POINTS) -> Figure:
    """Per step: stacked tokens vs the budget, KV blocks vs the pool (with swap traffic and
    the thrash ratio), the two queues; below, the requests over the run's whole clock (to
    its end, idle stretches and starved requests included)."""
    steps = records.steps
    if steps is None:
        raise KvschedError(f"{records.scenario}/{records.name}: no steps.csv to draw a "
                           "timeline from (the run used --records summary)")
    series = timeline_series(steps, max_points)
    fig = Figure(figsize=(12, 11), dpi=DPI, layout="constrained")
    top, bottom = cast(Any, fig.subfigures(2, 1, height_ratios=(7, 2.6)))
    tokens_ax, blocks_ax, queue_ax = top.subplots(3, 1, sharex=True, height_ratios=(3, 2, 2))
    _draw_lifecycle(bottom.subplots(), records)
    width = int(series["num_steps"].max()) if len(series) else 1
    detail = (f"{len(steps):,} steps, budget {records.max_num_batched_tokens:,} tokens, "
              f"pool {records.num_blocks:,} blocks")
    if width > 1:
        detail += f"; each point = {width:,} steps (tokens: mean per step, line: peak step)"
    fig.suptitle(f"{records.scenario} / {records.name}: tokens, KV blocks and queues per "
                 f"engine step\n{detail}", fontsize="medium")
    if series.empty:
        for ax in (tokens_ax, blocks_ax, queue_ax):
            ax.set_axis_off()
        statuses = records.requests["status"].value_counts()
        why = ", ".join(f"{n:,} {status}" for status, n in statuses.items())
        tokens_ax.text(0.5, 0.5, f"no step was executed ({why}): the requests over the run "
                       "are below", ha="center", va="center", transform=tokens_ax.transAxes)
        return fig
    edges = np.append(series["step"], series["step"].iloc[-1] + series["num_steps"].iloc[-1])
    per_step = series["num_steps"].to_numpy()
    base = np.zeros(len(series))
    for column in ("decode", "prefill", "recomputed"):
        upper = base + series[f"{column}_tokens"].to_numpy() / per_step
        _stairs(tokens_ax, upper, edges, baseline=base, fill=True, color=COLORS[column],
                         label=f"{column} ({int(series[f'{column}_tokens'].sum()):,})")
        base = upper
    recomputed = series["recomputed_tokens"].to_numpy() / per_step
    if recomputed.any():  # a thin band on top of the stack: also drawn at its own height
        _stairs(tokens_ax, np.where(recomputed > 0, recomputed, np.nan), edges,
                         color=COLORS["recomputed"], linewidth=1.2, zorder=3,
                         label="recomputed, at its own height")
    if width > 1:
        _stairs(tokens_ax, series["peak_tokens"], edges, color=COLORS["peak"], linewidth=0.5,
                         zorder=0.5, label="peak step")
    tokens_ax.axhline(records.max_num_batched_tokens, color=COLORS["limit"], linestyle="--",
                      linewidth=1, label=f"budget ({records.max_num_batched_tokens:,})")
    ceiling = max(records.max_num_batched_tokens, series["peak_tokens"].max())
    if wide_range(base[base > 0]) or wide_range(series["peak_tokens"][series["peak_tokens"] > 0]):
        # decodes (a few tokens) and prefills (thousands) in one picture: both stay visible
        tokens_ax.set_yscale("log")
        tokens_ax.set_ylim(0.8, ceiling * 1.5)
        tokens_ax.set_ylabel("tokens per step (log scale)")
    else:
        tokens_ax.set_ylim(0, ceiling * 1.05)
        tokens_ax.set_ylabel("tokens per step")

    _stairs(blocks_ax, series["blocks_used"], edges, fill=True, color=COLORS["blocks"],
                     label="blocks used" + (" (peak)" if width > 1 else ""))
    peak = int(series["blocks_used"].max())
    # Scaled to what was used: 40 of 2,000 blocks must not be a flat line at the bottom.
    off_scale = peak < records.num_blocks / 2
    blocks_ax.axhline(records.num_blocks, color=COLORS["limit"], linewidth=1,
                      label=f"pool ({records.num_blocks:,}" + (
                          f", above: peak use {peak:,})" if off_scale else ")"))
    if "swapped_out_blocks" in series.columns and (
            series["swapped_out_blocks"].any() or series["swapped_in_blocks"].any()):
        moved = (series["swapped_out_blocks"] + series["swapped_in_blocks"]).to_numpy()
        _stairs(blocks_ax, moved / per_step, edges, color=COLORS["swap"], linewidth=1.2,
                         label=f"swapped out + in per step ({int(moved.sum()):,} blocks)")
    if "cached_blocks" in series.columns and series["cached_blocks"].any():
        evicted = int(series["evicted_blocks"].sum()) if "evicted_blocks" in series else 0
        _stairs(blocks_ax, series["cached_blocks"], edges, color=COLORS["cached"],
                linewidth=1.2, label=f"prefix-cached blocks, in use or free ({evicted:,} "
                                     "evicted)")
        peak = max(peak, int(series["cached_blocks"].max()))
        off_scale = peak < records.num_blocks / 2
    twin = "thrash_ratio" in series.columns and series["thrash_ratio"].max() > 0
    if twin:
        ratio_ax = blocks_ax.twinx()
        _stairs(ratio_ax, series["thrash_ratio"], edges, color=COLORS["thrash"], linewidth=0.9,
                        alpha=0.8)
        ratio_ax.set_ylabel("thrash ratio", color=COLORS["thrash"])
        ratio_ax.set_ylim(bottom=0)
        blocks_ax.plot([], [], color=COLORS["thrash"], linewidth=0.9,
                       label=f"thrash ratio (right, max {series['thrash_ratio'].max():.3g})")
    if records.watermark_blocks and not off_scale:
        blocks_ax.axhline(records.num_blocks - records.watermark_blocks, color=COLORS["limit"],
                          linestyle=":", linewidth=1,
                          label=f"watermark ({records.watermark_blocks:,} kept free)")
    preempted = series[series["num_preempted"] > 0]
    if len(preempted):
        blocks_ax.plot(preempted["step"] + preempted["num_steps"] / 2, preempted["blocks_used"],
                       "v", color=COLORS["preempt"], markersize=4, linestyle="none",
                       label=f"preemption ({int(series['num_preempted'].sum()):,})")
    blocks_ax.set_ylabel("KV blocks")
    blocks_ax.set_ylim(0, max(peak, 1) * 1.3 if off_scale
                       else max(records.num_blocks, peak) * 1.1)

    for column in ("waiting", "running"):
        _stairs(queue_ax, series[f"num_{column}"], edges, color=COLORS[column], linewidth=1.2,
                        label=column + (" (peak)" if width > 1 else ""))
    queue_ax.set_ylabel("requests")
    queue_ax.set_ylim(bottom=0)
    queue_ax.set_xlabel("engine step")
    queue_ax.set_xlim(edges[0], edges[-1])

    if "backpressure" in series.columns and series["backpressure"].any():
        up = series["backpressure"].to_numpy() > 0
        up = np.append(up, up[-1])  # one flag per edge: the last bucket is shaded to its end
        for ax in (tokens_ax, blocks_ax, queue_ax):  # behind the data, named once
            ax.fill_between(edges, 0, 1, where=up, step="post",
                            transform=ax.get_xaxis_transform(), color=COLORS["backpressure"],
                            alpha=0.45, linewidth=0, zorder=0,
                            label="backpressure" if ax is tokens_ax else None)
    for ax in (tokens_ax, blocks_ax, queue_ax):
        right = 1.07 if ax is blocks_ax and twin else 1.0  # clear of the thrash ratio's axis
        ax.legend(loc="upper left", bbox_to_anchor=(right, 1.0), fontsize="small",
                  frameon=False)
    if not np.array_equal(series["time"], series["step"]):
        _time_axis(tokens_ax, steps, records.time_unit)
    return fig


def lifecycle_series(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests over the run's clock: at each time a request arrived, started or finished,
    the cumulative counts `arrived`, `finished`, `starved` (by arrival) and `waiting`
    (arrived, not yet scheduled once: starved and unfinished requests stay in it)."""
    arrivals = requests["arrival_time"].to_numpy(dtype=float)
    starts = requests["first_scheduled_time"].to_numpy(dtype=float)
    finishes = requests["finish_time"].to_numpy(dtype=float)
    starved = arrivals[requests["status"].to_numpy() == "starved"]
    times = np.unique(np.concatenate([arrivals, starts[np.isfinite(starts)],
                                      finishes[np.isfinite(finishes)]]))

    def upto(values: np.ndarray) -> np.ndarray:
        values = np.sort(values[np.isfinite(values)])
        return np.searchsorted(values, times, side="right")

    arrived = upto(arrivals)
    return pd.DataFrame({"time": times, "arrived": arrived, "finished": upto(finishes),
                         "starved": upto(starved), "waiting": arrived - upto(starts)})


def _draw_lifecycle(ax: Axes, records: VariantRecords) -> None:
    needed = ("arrival_time", "first_scheduled_time", "finish_time")
    if not all(column in records.requests.columns for column in needed):
        ax.set_axis_off()
        return
    series = lifecycle_series(records.requests)
    end = max([records.duration or 0.0, *series["time"]], default=0.0)
    times = np.append(series["time"], end)
    for column, style in (("arrived", ":"), ("finished", "-"), ("waiting", "-"),
                          ("starved", "--")):
        values = series[column].to_numpy()
        if column == "starved" and not values.any():
            continue
        final = int(values[-1]) if len(values) else 0
        label = f"{column} ({final:,} at the end)" if column != "waiting" else (
            f"waiting, never run yet (peak {int(values.max(initial=0)):,})")
        ax.step(times, np.append(values, values[-1] if len(values) else 0), where="post",
                color=COLORS["waiting" if column == "waiting" else column], linestyle=style,
                linewidth=1.3, label=label)
    unit = _unit(records.time_unit)
    ax.set_xlim(0, end if end > 0 else 1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"time ({unit}) over the whole run, idle stretches included")
    ax.set_ylabel("requests")
    ax.set_title("requests over the run (from requests.csv)", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)


def _stairs(ax: Axes, values: Any, edges: np.ndarray, baseline: Any = None,
            fill: bool = False, **style: Any) -> None:
    """`ax.stairs` drawn as a step line or a step-filled area: the same picture, but
    matplotlib's patch limits walk every segment of a StepPatch (half of a timeline's time)."""
    heights = np.append(np.asarray(values, dtype=float), np.nan)
    if fill:
        low = np.zeros(len(edges)) if baseline is None else np.append(baseline, np.nan)
        ax.fill_between(edges, low, heights, step="post", linewidth=0, **style)
    else:
        ax.step(edges, heights, where="post", **style)


def _time_axis(ax: Axes, steps_frame: pd.DataFrame, time_unit: str) -> None:
    """The run's clock along the top, when it differs from the step count (idle gaps, step
    durations). Outside the run the mapping is NaN, so that matplotlib drops those ticks
    instead of piling them up at an end."""
    last = steps_frame.iloc[-1]
    end = last["time"] + (last["duration"] if "duration" in steps_frame.columns else 0)
    steps = np.append(steps_frame["step"].to_numpy(dtype=float), last["step"] + 1)
    times = np.append(steps_frame["time"].to_numpy(dtype=float), end)
    if np.any(np.diff(times) <= 0):
        return

    def to_time(step: Any) -> Any:
        return np.interp(step, steps, times, left=np.nan, right=np.nan)

    def to_step(time: Any) -> Any:
        return np.interp(time, times, steps, left=np.nan, right=np.nan)

    top = ax.secondary_xaxis("top", functions=(to_time, to_step))
    top.set_xlabel(f"time ({_unit(time_unit)})")


def draw_ttft(variants: list[VariantRecords]) -> Figure:
    """TTFT of all variants against the share of all their requests that had a first token
    by then (one panel per request class when present), beside what each variant's
    requests came to (completed, unfinished, starved, rejected) and its incidents: a variant
    that serves few of its requests ends low on the left and shows why on the right."""
    frames = [v.requests for v in variants]
    classes = class_names(frames)
    panels: list[str | None] = [None, *classes]
    height = 4.4 + 0.2 * (len(variants) + 2)  # room for the legends under the panels
    fig = Figure(figsize=(1 + 5.2 * len(panels) + 4.2, height), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(panels) + 1, squeeze=False,
                        width_ratios=[5.2] * len(panels) + [4.2])[0]
    cdf_axes, outcome_ax = list(axes[:-1]), axes[-1]
    for ax in cdf_axes[1:]:
        ax.sharex(cdf_axes[0])
        ax.sharey(cdf_axes[0])
    unit = _units(v.time_unit for v in variants)
    fig.suptitle(f"{variants[0].scenario}: time to first token per variant, over all its "
                 "requests (a curve ends at the share that got a token)", fontsize="medium")
    log = wide_range(pd.concat([frame["ttft"] for frame in frames]))
    for ax, class_name in zip(cdf_axes, panels, strict=True):
        for i, records in enumerate(variants):
            requests = records.requests
            if class_name is not None:
                requests = requests[requests["class"] == class_name]
            _draw_cdf(ax, ttft_share(requests), len(requests), records.name, _color(i),
                      LINE_STYLES[i % len(LINE_STYLES)])
        _draw_slo(ax, variants, vertical=True)
        ax.set_title("all requests" if class_name is None else f"class {class_name}")
        ax.set_xlabel(f"TTFT ({unit})" + (", log scale" if log else ""))
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if log:
            ax.set_xscale("log")
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], marker=m, color="grey", linestyle="none") for m in "oD"]
        ax.legend(handles, labels + ["p50", "p99 (of those with a token)"], loc="upper center",
                  fontsize="small", bbox_to_anchor=(0.5, -0.13), frameon=False)
    cdf_axes[0].set_ylabel("share of the requests with a first token by then")
    _draw_outcomes(outcome_ax, variants)
    return fig


def _draw_outcomes(ax: Axes, variants: list[VariantRecords]) -> None:
    """A bar per variant: its requests completed, unfinished, starved and rejected, stacked
    to 100%, with the diagnosis' incidents named beside it."""
    names = [v.name for v in variants]
    statuses = [s for s in OUTCOME_ORDER if any(dict(v.outcomes).get(s) for v in variants)]
    statuses += sorted({s for v in variants for s, _ in v.outcomes} - set(OUTCOME_ORDER))
    rows = np.arange(len(variants))
    left = np.zeros(len(variants))
    for status in statuses:
        counts = np.array([dict(v.outcomes).get(status, 0) for v in variants], dtype=float)
        totals = np.array([max(sum(n for _, n in v.outcomes), 1) for v in variants])
        share = counts / totals
        ax.barh(rows, share, left=left, color=OUTCOME_COLORS.get(status, "#777777"),
                height=0.6, label="completed" if status == "finished" else status,
                gid=f"outcome-{status}")
        for row, (n, width, start) in enumerate(zip(counts, share, left, strict=True)):
            if width >= 0.12:
                ax.text(start + width / 2, row, f"{int(n):,}", ha="center", va="center",
                        fontsize="small", color="white")
        left += share
    for row, records in enumerate(variants):
        text = ", ".join(records.incidents) if records.incidents else "no incident"
        ax.text(0.01, row + 0.42, text, va="center", ha="left", fontsize="small",
                color="#c00000" if records.incidents else "grey", gid="incidents")
    ax.set_yticks(rows, names)
    ax.set_ylim(len(variants) - 0.4, -0.7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the variant's requests")
    ax.set_title("requests: completed, starved, unfinished;\nincidents (the diagnosis)",
                 fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize="small",
              frameon=False, ncols=2)


def _draw_slo(ax: Axes, variants: list[VariantRecords], vertical: bool) -> None:
    """The TTFT target of the variants that set one, as a reference line."""
    for target in sorted({v.ttft_slo for v in variants if v.ttft_slo is not None}):
        names = ", ".join(v.name for v in variants if v.ttft_slo == target)
        line = ax.axvline if vertical else ax.axhline
        line(target, color=COLORS["limit"], linestyle=(0, (4, 3)), linewidth=1,
             label=f"TTFT SLO {fmt(target)}" + (f" ({names})" if len(variants) > 1 else ""))


def _draw_cdf(ax: Axes, share: pd.DataFrame, num_requests: int, name: str, color: str,
              style: Any = "-") -> None:
    """A variant's `ttft_share` as steps, its p50 and p99 (over the requests with a token,
    as the summary has them) marked where the curve reaches them."""
    count = f"{len(share):,}/{num_requests:,} got a token"
    if share.empty:
        ax.plot([], [], color=color, label=f"{name}: no first token ({count})")
        return
    p50, p99 = np.percentile(share["ttft"], [50, 99])
    ax.step(np.append(share["ttft"].iloc[0], share["ttft"]), np.append(0, share["share"]),
            where="post", color=color, linewidth=1.5, linestyle=style,
            label=f"{name}: p50 {fmt(float(p50))}, p99 {fmt(float(p99))} ({count})")
    reached = len(share) / max(num_requests, 1)
    ax.plot([p50], [0.5 * reached], "o", color=color, markeredgecolor="white")
    ax.plot([p99], [0.99 * reached], "D", color=color, markeredgecolor="white")


def draw_latency(variants: list[VariantRecords]) -> Figure:
    """Per request TTFT (and, when recorded, end-to-end latency) against prompt length, one
    panel per variant; requests without a first token in a strip above, by status."""
    count = len(variants)
    fig = Figure(figsize=(1 + 4.6 * count, 5.6), dpi=DPI, layout="constrained")
    axes = fig.subplots(2, count, sharex=True, sharey="row", height_ratios=(1, 6),
                        squeeze=False)
    unit = _units(v.time_unit for v in variants)
    fig.suptitle(f"{variants[0].scenario}: time to first token and end-to-end latency "
                 "against prompt length, per request", fontsize="medium")
    prompts = pd.concat([v.requests["prompt_len"] for v in variants])
    ttfts = pd.concat([v.requests["ttft"] for v in variants] + [
        v.requests["e2e_latency"] for v in variants if "e2e_latency" in v.requests.columns])
    for i, records in enumerate(variants):
        strip, main = axes[0][i], axes[1][i]
        points = latency_points(records.requests)
        main.scatter(points.served["prompt_len"], points.served["ttft"], s=9, alpha=0.55,
                     color=_color(i), linewidths=0,
                     label=f"TTFT ({len(points.served):,})")
        if "e2e_latency" in records.requests.columns:
            done = records.requests.dropna(subset=["e2e_latency"])
            main.scatter(done["prompt_len"], done["e2e_latency"], s=10, alpha=0.35,
                         marker="o", facecolors="none", edgecolors=_color(i), linewidths=0.6,
                         label=f"end-to-end ({len(done):,} finished)")
        _draw_apart(strip, points.apart, _color(i))
        _draw_slo(main, [records], vertical=False)
        strip.set_title(_variant_title(records), color=_color(i), fontsize="medium")
        main.set_xlabel("prompt length (tokens)")
        main.grid(alpha=0.3)
        served_handles, served_labels = main.get_legend_handles_labels()
        apart_handles, apart_labels = strip.get_legend_handles_labels()
        main.legend(served_handles + apart_handles, served_labels + apart_labels,
                    loc="best", fontsize="small", framealpha=0.8)
    axes[0][0].set_ylabel("no first\ntoken", fontsize="small")
    axes[1][0].set_ylabel(f"TTFT, end-to-end ({unit})")
    if wide_range(prompts):
        axes[1][0].set_xscale("log")
    if wide_range(ttfts):
        axes[1][0].set_yscale("log")
    if prompts.size:
        axes[1][0].set_xlim(prompts.min() * 0.9, prompts.max() * 1.05)
    return fig


def _variant_title(records: VariantRecords) -> str:
    """The variant, how many of its requests completed, and its incidents."""
    total = sum(n for _, n in records.outcomes)
    done = dict(records.outcomes).get("finished", 0)
    incidents = ", ".join(records.incidents) if records.incidents else "no incident"
    return f"{records.name}: {done:,}/{total:,} completed\n{incidents}"


def _draw_apart(ax: Axes, apart: pd.DataFrame, color: str) -> None:
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    if apart.empty:
        ax.text(0.5, 0.5, "every request got a first token", ha="center", va="center",
                fontsize="small", color="grey", transform=ax.transAxes)
        return
    # a fixed spread (golden-ratio steps), not random: the same picture on every redraw
    spread = (np.arange(len(apart)) * 0.6180339887) % 1.0 * 0.7 + 0.15
    for status, group in apart.groupby("status", sort=True):
        marker = APART_MARKERS.get(str(status), "s")
        ax.scatter(group["prompt_len"], spread[group.index], s=16, marker=marker,
                   color=color, linewidths=1, label=f"{status} ({len(group):,})")


def _color(index: int) -> str:
    return VARIANT_COLORS[index % len(VARIANT_COLORS)]


# -- writing -------------------------------------------------------------------------------


def save_png(fig: Figure, path: Path) -> Path:
    """Write `fig` whole: to a temporary name in the same folder, then renamed over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=DPI)
        os.replace(tmp, path)
    except OSError as exc:
        raise KvschedError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def replica_records(records: VariantRecords, folder: Path) -> list[VariantRecords]:
    """A cluster run's variant as one VariantRecords per replica (its steps, its requests,
    its pool from summary.json); a single-replica run as itself."""
    if records.steps is None or "replica" not in records.steps.columns:
        return [records]
    summary = read_json(folder / "summary.json")
    pools = {int(r["replica"]): int(r["num_blocks"]) for r in summary.get("replicas", ())}
    out = []
    for replica in sorted(pools):
        steps = records.steps[records.steps["replica"] == replica].reset_index(drop=True)
        requests = records.requests[records.requests["replica"] == replica]
        out.append(replace(records, name=f"{records.name}-r{replica}", steps=steps,
                           requests=requests.reset_index(drop=True),
                           num_blocks=pools[replica]))
    return out


def plot_run_folder(folder: Path) -> list[Path]:
    """Write timeline-<variant>.png per variant (per replica of a cluster run:
    timeline-<variant>-r<i>.png), ttft.png and latency.png into a run folder."""
    variants = read_run(folder)
    written = [save_png(draw_timeline(part), folder / f"timeline-{part.name}.png")
               for records in variants if records.steps is not None  # not --records summary
               for part in replica_records(records, folder / records.name)]
    written.append(save_png(draw_ttft(variants), folder / "ttft.png"))
    written.append(save_png(draw_latency(variants), folder / "latency.png"))
    return written
