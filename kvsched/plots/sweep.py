"""The picture of a sweep (`<out>/sweep-<name>/sweep.png`), drawn from its summary.csv.

A sweep's latency figures are over the requests that completed: a configuration that starves
most of its requests serves the few it does at once, and its TTFT alone would read as the
best of the grid. So the picture leads with what every run completed, starved and left
unfinished, then names each run's incidents (the diagnosis), and draws a latency figure
computed over only part of its requests hollow, on a faint dotted line, ringed when the run
has an incident; the SLO a variant sets is a line on its panels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from kvsched.errors import KvschedError
from kvsched.plots.run import (
    COLORS,
    DPI,
    LINE_MARKERS,
    _color,
    _numeric,
    _per,
    _short,
    _units,
    _value_key,
    read_csv,
    read_json,
    save_png,
    wide_range,
)
from kvsched.records.diagnosis import KINDS
from kvsched.report import fmt

SWEEP_METRICS = ("ttft_p50", "ttft_p99", "throughput", "num_preemptions")
"""The figures drawn per point; a sweep's summary.csv always has them."""

COUNT_COLUMNS = ("num_requests", "num_finished", "num_starved", "num_unfinished",
                 "num_rejected")
"""What each run did with its requests (drawn when summary.csv has them, as every sweep
since kvsched 0.x writes)."""

OUTCOMES: tuple[tuple[str, str, Literal["-", "--", ":", "-."]], ...] = (
    ("num_finished", "completed", "-"), ("num_starved", "starved", "--"),
    ("num_unfinished", "unfinished", ":"), ("num_rejected", "rejected", "-."))
"""The requests panel's lines: column, name, line style."""

INCIDENT_RING = "#c00000"


@dataclass(frozen=True, slots=True)
class SweepAxis:
    """One swept field as sweep.json records it."""

    path: str
    option: str
    values: tuple[Any, ...]
    geometric: bool


def read_sweep(folder: Path) -> tuple[dict[str, Any], list[SweepAxis], pd.DataFrame]:
    """sweep.json, its axes, and summary.csv (one row per grid point and variant)."""
    info = read_json(folder / "sweep.json")
    try:
        axes = [SweepAxis(str(a["path"]), str(a["option"]), tuple(a["values"]),
                          bool(a["geometric"])) for a in info["axes"]]
    except (KeyError, TypeError) as exc:
        raise KvschedError(f"{folder / 'sweep.json'}: no usable field {exc}") from None
    if not axes:
        raise KvschedError(f"{folder / 'sweep.json'}: no axes")
    columns = tuple(a.path for a in axes) + ("variant", "time_unit") + SWEEP_METRICS
    return info, axes, read_csv(folder / "summary.csv", columns)


def sweep_x_axis(axes: list[SweepAxis]) -> SweepAxis:
    """The axis drawn along x: the numeric one with the most values (the first of equals),
    else the categorical one with the most; the others become lines."""
    numeric = [axis for axis in axes if _numeric(axis.values)]
    return max(numeric or axes, key=lambda axis: len(axis.values))


def sweep_lines(frame: pd.DataFrame, axes: list[SweepAxis]) -> dict[str, pd.DataFrame]:
    """One line per value of the other axes (and per variant, when several): its label and a
    frame sorted by `x`: SWEEP_METRICS and those of COUNT_COLUMNS the summary has (floats),
    `complete` (every request of the run finished), `incidents` (the diagnosis' kinds, a
    tuple) and `variant`. A numeric x axis gives its values as `x`; a categorical one the
    position of each value in the axis (draw them as tick labels)."""
    x_axis = sweep_x_axis(axes)
    others = [axis.path for axis in axes if axis is not x_axis]
    keys = others + (["variant"] if frame["variant"].nunique() > 1 else [])
    if _numeric(x_axis.values):
        x = frame[x_axis.path].astype(float)
    else:
        position = {_value_key(value): i for i, value in enumerate(x_axis.values)}
        x = frame[x_axis.path].map(lambda value: position.get(_value_key(value), np.nan))
    points = frame.assign(x=x)
    counts = [c for c in COUNT_COLUMNS if c in frame.columns]
    groups = points.groupby(keys, sort=False, dropna=False) if keys else [((), points)]
    lines = {}
    for key, group in groups:
        values = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(value) if name == "variant" else f"{_short(name)}={value}"
                          for name, value in zip(keys, values, strict=True))
        ordered = group.sort_values("x", kind="stable")
        line = ordered[["x", *SWEEP_METRICS, *counts]].astype(float)
        line["complete"] = (line["num_finished"] == line["num_requests"]
                            if {"num_finished", "num_requests"} <= set(counts) else True)
        line["incidents"] = [incident_kinds(text) for text in (
            ordered["incidents"] if "incidents" in ordered.columns else [""] * len(ordered))]
        line["variant"] = ordered["variant"].astype(str).to_numpy()
        lines[label or str(group["variant"].iloc[0])] = line.reset_index(drop=True)
    return lines


def incident_kinds(text: Any) -> tuple[str, ...]:
    """summary.csv's `incidents` cell ('starvation; head_of_line', or empty) as kinds."""
    if not isinstance(text, str):
        return ()
    return tuple(kind.strip() for kind in text.split(";") if kind.strip())


def variant_slos(info: dict[str, Any], axes: list[SweepAxis]) -> dict[str, dict[str, float]]:
    """Each variant's SLO targets as sweep.json records them (`variant_slo`), none when the
    sweep changes an SLO (then a point's target is not its variant's)."""
    if any(axis.path == "slo" or axis.path.startswith("slo.") for axis in axes):
        return {}
    slos = info.get("variant_slo") or {}
    return {str(name): {str(k): float(v) for k, v in targets.items()
                        if isinstance(v, int | float)}
            for name, targets in slos.items() if isinstance(targets, dict)}


def draw_sweep(axes: list[SweepAxis], frame: pd.DataFrame, title: str,
               slos: dict[str, dict[str, float]] | None = None) -> Figure:
    """What each run completed, its incidents, TTFT p50 and p99 (over the completed
    requests), throughput and preemptions against the swept parameter."""
    x_axis = sweep_x_axis(axes)
    lines = sweep_lines(frame, axes)
    time_units = frame["time_unit"].dropna()
    unit = _units(time_units)
    per = _per(str(time_units.iloc[0])) if time_units.nunique() == 1 else "step or s"
    fig = Figure(figsize=(12, 12), dpi=DPI, layout="constrained")
    grid = fig.subplots(3, 2, sharex=True, height_ratios=(1, 1, 1))
    status_ax, incident_ax = grid[0]
    panels = {
        "ttft_p50": (grid[1][0], f"TTFT p50 ({unit}), over the completed requests"),
        "ttft_p99": (grid[1][1], f"TTFT p99 ({unit}), over the completed requests"),
        "throughput": (grid[2][0], f"throughput (generated tokens per {per})"),
        "num_preemptions": (grid[2][1], "preemptions (count)"),
    }
    others = [f"{axis.path} ({axis.option})" for axis in axes if axis is not x_axis]
    lines_by = f"\none line per value of {', '.join(others)}" if others else ""
    fig.suptitle(f"{title}\nswept over {x_axis.path} ({x_axis.option}) along x{lines_by}",
                 fontsize="medium")
    counted = all(column in frame.columns for column in COUNT_COLUMNS[:3])
    _draw_outcomes(status_ax, lines) if counted else _unknown(status_ax, "requests")
    _draw_incidents(incident_ax, lines)
    for metric, (ax, label) in panels.items():
        for i, line in enumerate(lines.values()):
            _draw_metric(ax, line, metric, i)
        ax.set_title(label, fontsize="medium")
        ax.grid(alpha=0.3)
        if metric.startswith("ttft") and wide_range(frame[metric]):
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
    ttft_slo = _draw_slo_lines([panels["ttft_p50"][0], panels["ttft_p99"][0]], lines,
                               slos or {}, "ttft", unit)
    for ax in grid[2]:
        ax.set_xlabel(x_axis.path + (" (log scale)" if _numeric(x_axis.values)
                                      and x_axis.geometric else ""))
    _sweep_ticks(grid[2][0], x_axis)
    handles = [Line2D([], [], color=_color(i), marker=LINE_MARKERS[i % len(LINE_MARKERS)],
                      markersize=5) for i in range(len(lines))]
    labels = list(lines)
    handles += [Line2D([], [], marker="o", color="grey", markerfacecolor="white",
                       linestyle=":", markersize=6),
                Line2D([], [], marker="o", color="grey", markerfacecolor="none",
                       markeredgecolor=INCIDENT_RING, markersize=11, linestyle="none"),
                Line2D([], [], marker="x", color="grey", linestyle="none")]
    labels += ["hollow, dotted: some requests starved or unfinished (the figure is over the "
               "completed ones only)", "red ring: an incident (named above, right)",
               "no request got a first token"]
    if ttft_slo:
        handles.append(Line2D([], [], color=COLORS["limit"], linestyle=(0, (4, 3))))
        labels.append(ttft_slo)
    fig.legend(handles, labels, loc="outside lower center", ncols=2,
               fontsize="small", frameon=False)
    return fig


def _draw_outcomes(ax: Axes, lines: dict[str, pd.DataFrame]) -> None:
    """Each run's requests: the share completed (solid), starved (dashed), unfinished
    (dotted) and rejected (dash-dot), the last two only where some were."""
    drawn = set()
    for i, line in enumerate(lines.values()):
        total = line["num_requests"].replace(0, np.nan)
        for column, _, style in OUTCOMES:
            if column not in line.columns or (column != "num_finished"
                                              and not line[column].any()):
                continue
            drawn.add(column)
            ax.plot(line["x"], line[column] / total, linestyle=style, color=_color(i),
                    marker=LINE_MARKERS[i % len(LINE_MARKERS)] if style == "-" else None,
                    markersize=5, linewidth=1.6 if style == "-" else 1.2)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("requests of each run: completed, starved, unfinished (share)",
                 fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend([Line2D([], [], color="grey", linestyle=style) for column, _, style in OUTCOMES
               if column in drawn or column == "num_finished"],
              [name for column, name, _ in OUTCOMES if column in drawn
               or column == "num_finished"], fontsize="small", loc="center right")


def _draw_incidents(ax: Axes, lines: dict[str, pd.DataFrame]) -> list[str]:
    """A row per incident kind found, a marker where a run had it: which points the
    diagnosis flags, and for what. The kinds drawn."""
    found = {kind for line in lines.values() for kinds in line["incidents"] for kind in kinds}
    kinds = [kind for kind in (*KINDS, *sorted(found - set(KINDS))) if kind in found]
    ax.set_title("incidents (the diagnosis of each run)", fontsize="medium")
    ax.grid(alpha=0.3, axis="x")
    if not kinds:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no incident at any point", ha="center", va="center",
                color="grey", transform=ax.transAxes)
        return kinds
    row = {kind: k for k, kind in enumerate(kinds)}
    count = len(lines)
    for i, line in enumerate(lines.values()):
        offset = (i - (count - 1) / 2) * min(0.6 / count, 0.15)
        xs, ys = [], []
        for x, found_kinds in zip(line["x"], line["incidents"], strict=True):
            for kind in found_kinds:
                xs.append(x)
                ys.append(row[kind] + offset)
        ax.plot(xs, ys, linestyle="none", marker=LINE_MARKERS[i % len(LINE_MARKERS)],
                color=_color(i), markersize=6)
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(-0.6, len(kinds) - 0.4)
    ax.invert_yaxis()
    return kinds


def _draw_metric(ax: Axes, line: pd.DataFrame, metric: str, i: int) -> None:
    """One line of a figure: solid between runs that completed every request, faint and
    dotted through the others, whose points are hollow; a red ring where a run has an
    incident; an x at the bottom where no request got a first token."""
    color, marker = _color(i), LINE_MARKERS[i % len(LINE_MARKERS)]
    complete = line["complete"].to_numpy(dtype=bool)
    values = line[metric].to_numpy(dtype=float)
    ax.plot(line["x"], values, linestyle=":", color=color, alpha=0.5, linewidth=1)
    ax.plot(line["x"], np.where(complete, values, np.nan), linestyle="-", color=color,
            linewidth=1.5)
    ax.plot(line["x"][complete], values[complete], linestyle="none", marker=marker,
            markersize=5, color=color)
    ax.plot(line["x"][~complete], values[~complete], linestyle="none", marker=marker,
            markersize=6, color=color, markerfacecolor="white", gid="incomplete")
    flagged = np.array([bool(kinds) for kinds in line["incidents"]], dtype=bool)
    ax.plot(line["x"][flagged], values[flagged], linestyle="none", marker="o",
            markersize=12, markerfacecolor="none", markeredgecolor=INCIDENT_RING,
            markeredgewidth=1.2, gid="incident")
    missing = np.isnan(values)
    if metric.startswith("ttft") and missing.any():
        ax.plot(line["x"][missing], np.full(int(missing.sum()), 0.03), "x", color=color,
                markersize=8, transform=ax.get_xaxis_transform(), clip_on=False)


def _draw_slo_lines(axes: list[Axes], lines: dict[str, pd.DataFrame],
                    slos: dict[str, dict[str, float]], key: str, unit: str) -> str | None:
    """The `key` target of the variants drawn, one line per distinct value; its legend
    text, or None when no variant sets one."""
    variants = sorted({v for line in lines.values() for v in line["variant"]})
    targets: dict[float, list[str]] = {}
    for variant in variants:
        target = slos.get(variant, {}).get(key)
        if target is not None:
            targets.setdefault(target, []).append(variant)
    if not targets:
        return None
    for ax in axes:
        for target in targets:
            ax.axhline(target, color=COLORS["limit"], linestyle=(0, (4, 3)), linewidth=1,
                       gid="slo")
    parts = [f"{fmt(target)} {unit}" + (f" ({', '.join(names)})" if len(targets) > 1
                                        or len(names) < len(variants) else "")
             for target, names in sorted(targets.items())]
    return f"SLO: {key.upper()} {', '.join(parts)}"


def _unknown(ax: Axes, what: str) -> None:
    ax.set_yticks([])
    ax.text(0.5, 0.5, f"summary.csv has no {what} counts (an older sweep): rerun it",
            ha="center", va="center", color="grey", transform=ax.transAxes)


def _sweep_ticks(ax: Axes, x_axis: SweepAxis) -> None:
    values = x_axis.values
    if not _numeric(values):
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        return
    if x_axis.geometric and min(values) > 0:
        ax.set_xscale("log")
    if len(values) <= 16:
        ax.set_xticks([float(v) for v in values], [fmt(v) for v in values])
        ax.minorticks_off()


def plot_sweep_folder(folder: Path) -> list[Path]:
    """Write sweep.png into a sweep folder."""
    info, axes, frame = read_sweep(folder)
    title = f"{folder.name}: {info.get('source', 'scenario')}"
    figure = draw_sweep(axes, frame, title, variant_slos(info, axes))
    return [save_png(figure, folder / "sweep.png")]
