"""The picture of a capacity search (`<out>/capacity-<name>/capacity.png`): each SLO figure
against the request rate of every probe, drawn from the folder's CSV files, so that
`capacity --plot` and `kvsched plot <out>/capacity-<name>` draw the same picture.

A panel per SLO metric; when the searches' rates overlap (variants on top of each other),
a column of panels per search. Each panel has its SLO as a labelled line, every probe
(holds: a dot, fails: a cross, stopped early once its SLO was lost: a triangle at the top),
and the answer, the highest rate that holds, marked and labelled with its rate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from kvsched.errors import KvschedError
from kvsched.plots.run import DPI, _color, read_csv, read_json, save_png, wide_range
from kvsched.report import fmt, picked_title

FAILS = "#c00000"
MAX_COLUMNS = 4  # searches side by side; more wrap onto further rows


def search_frames(answers: pd.DataFrame, probes: pd.DataFrame,
                  point_columns: list[str]) -> list[tuple[str, pd.Series, pd.DataFrame]]:
    """(label, its row of capacity.csv, its probes sorted by rate) per search, in the
    order of capacity.csv: the variant and the grid point's values name it."""
    keys = [*point_columns, "variant"]
    searches = []
    for _, answer in answers.iterrows():
        mask = np.ones(len(probes), dtype=bool)
        for key in keys:
            mask &= (probes[key].astype(str) == str(answer[key])).to_numpy()
        label = str(answer["variant"]) + "".join(
            f" {key.rsplit('.', 1)[-1]}={answer[key]}" for key in point_columns)
        searches.append((label, answer, probes[mask].sort_values("rate", kind="stable")))
    return searches


def overlapping(searches: list[tuple[str, pd.Series, pd.DataFrame]]) -> bool:
    """Whether two searches probed rates in a common range (drawn together, their
    points would lie on each other)."""
    spans = sorted((frame["rate"].min(), frame["rate"].max())
                   for _, _, frame in searches if len(frame))
    return any(next_low <= high for (_, high), (next_low, _) in zip(spans, spans[1:],
                                                                   strict=False))


def draw_capacity(answers: pd.DataFrame, probes: pd.DataFrame, targets: list[dict[str, Any]],
                  tolerance: float, time_unit: str | None, title: str,
                  point_columns: list[str] = ()) -> Figure:  # type: ignore[assignment]
    """capacity.png from capacity.csv (`answers`), capacity_probes.csv (`probes`) and the
    SLOs (`targets`: `metric`, `limit` and, when the user wrote a vLLM name, `written`)."""
    searches = search_frames(answers, probes, list(point_columns))
    if not searches or not targets:
        raise KvschedError(f"{title}: nothing to draw (no search or no SLO)")
    apart = len(searches) > 1 and overlapping(searches)
    columns = min(len(searches), MAX_COLUMNS) if apart else 1
    blocks = math.ceil(len(searches) / columns) if apart else 1
    groups = ([searches[i:i + columns] for i in range(0, len(searches), columns)] if apart
              else [searches])
    fig = Figure(figsize=(1.5 + 5.0 * columns, 0.9 + 3.3 * len(targets) * blocks), dpi=DPI,
                 layout="constrained")
    grid = fig.subplots(len(targets) * blocks, columns, squeeze=False)
    for block in range(blocks):  # a search's panels share its rates
        for c in range(columns):
            for t in range(1, len(targets)):
                grid[block * len(targets) + t][c].sharex(grid[block * len(targets)][c])
    per = "requests/step" if time_unit == "steps" else (
        "requests/s" if time_unit == "s" else "requests per time unit")
    slos = " and ".join(_slo_text(t, time_unit) for t in targets)
    fig.suptitle(f"{title}: the highest request rate with {slos} and no request starved\n"
                 f"(probes on a grid of x{1 + tolerance:g} steps: the answer holds, "
                 f"{tolerance:.0%} above it fails)", fontsize="medium")
    for block, group in enumerate(groups):
        for t, target in enumerate(targets):
            row = block * len(targets) + t
            for c in range(columns):
                ax = grid[row][c]
                if c >= len(group):
                    ax.set_axis_off()
                    continue
                members = [group[c]] if apart else group
                offset = block * columns + c if apart else 0
                answers_text = []
                for i, (label, answer, frame) in enumerate(members):
                    found = _draw_search(ax, frame, answer, target, _color(offset + i), label,
                                         labelled=t == 0)
                    answers_text.append((label, found, _color(offset + i)))
                _draw_limit(ax, target, time_unit)
                _answer_box(ax, answers_text, per, named=not apart)
                ax.set_ylabel(picked_title(target["metric"], time_unit or ""))
                if apart and t == 0:
                    ax.set_title(group[c][0], fontsize="medium", color=_color(offset))
                _rate_ticks(ax)
                ax.grid(alpha=0.3)
                ax.set_xlabel(f"request rate ({per}, log scale)")
    fig.legend(*_legend(searches if not apart else []), loc="outside lower center",
               ncols=3, fontsize="small", frameon=False)
    return fig


def _slo_text(target: dict[str, Any], time_unit: str | None) -> str:
    """`ttft_p99 <= 2 s`, with the vLLM name the user wrote, if any: the limit is in the
    summary key's unit (p99_ttft_ms=500 is ttft_p99 <= 0.5 s), as the figures are."""
    metric = target["metric"]
    unit = picked_title(metric, time_unit or "")[len(metric):].strip(" ()")
    written = target.get("written")
    return (f"{metric} <= {fmt(float(target['limit']))}" + (f" {unit}" if unit else "")
            + (f" ({written})" if written else ""))


def _draw_search(ax: Axes, frame: pd.DataFrame, answer: pd.Series, target: dict[str, Any],
                 color: str, label: str, labelled: bool) -> tuple[float, float] | None:
    """One search's probes on one metric: a line through the measured ones, dots where
    they hold, crosses where they fail, triangles at the top for those stopped early; the
    answer ringed, on a dotted vertical line. The answer's rate and the first that fails
    above it (NaN when none), or None when no rate holds."""
    metric = target["metric"]
    values = (pd.to_numeric(frame[metric], errors="coerce") if metric in frame
              else pd.Series(np.nan, index=frame.index))
    holds = frame["holds"].astype(str).str.lower().isin(("true", "1"))
    measured = values.notna()
    ax.plot(frame["rate"][measured], values[measured], color=color, linewidth=1, alpha=0.7,
            label=label)
    ax.plot(frame["rate"][measured & holds], values[measured & holds], "o", color=color,
            markersize=5, gid="holds")
    ax.plot(frame["rate"][measured & ~holds], values[measured & ~holds], "x", color=FAILS,
            markersize=7, markeredgewidth=1.5, gid="fails")
    stopped = ~measured
    if stopped.any():
        ax.plot(frame["rate"][stopped], np.full(int(stopped.sum()), 0.96), "^", color=FAILS,
                markersize=6, transform=ax.get_xaxis_transform(), clip_on=False,
                gid="stopped")
    if wide_range(values[measured]):
        ax.set_yscale("log")
    rate, above = _number(answer.get("rate")), _number(answer.get("rate_above"))
    if math.isnan(rate):
        return None
    ax.axvline(rate, color=color, linestyle=":", linewidth=1.2, gid="answer-rate")
    at = frame[np.isclose(frame["rate"], rate, rtol=1e-9)]
    value = _number(at[metric].iloc[0]) if len(at) and metric in at else math.nan
    if not math.isnan(value):
        ax.plot([rate], [value], "o", markersize=13, markerfacecolor="none",
                markeredgecolor=color, markeredgewidth=2, gid="answer")
    return rate, above


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _answer_box(ax: Axes, answers: list[tuple[str, tuple[float, float] | None, str]],
                per: str, named: bool) -> None:
    """The answers, in the panel's lower right corner (below a latency curve, which rises
    with the rate): `capacity 3.41 requests/s (3.48 fails)`, one line per search, each in
    its colour."""
    for row, (label, found, color) in enumerate(answers):
        name = f"{label}: " if named else ""
        if found is None:
            text = f"{name}no rate holds (even the lowest tried fails)"
        else:
            rate, above = found
            fails = f" ({fmt(above)} fails)" if not math.isnan(above) else " (the highest tried)"
            text = f"{name}capacity {fmt(rate)} {per}{fails}"
        ax.text(0.98, 0.03 + 0.075 * (len(answers) - 1 - row), text, transform=ax.transAxes,
                ha="right", va="bottom",
                fontsize="small", color=color if found is not None else FAILS, gid="capacity",
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1})


def _draw_limit(ax: Axes, target: dict[str, Any], time_unit: str | None) -> None:
    limit = float(target["limit"])
    ax.axhline(limit, color="#222222", linestyle=(0, (4, 3)), linewidth=1, gid="slo")
    ax.annotate(f"SLO {_slo_text(target, time_unit)}", (0.0, limit), xytext=(4, 3),
                xycoords=("axes fraction", "data"), textcoords="offset points", ha="left",
                va="bottom", fontsize="small", color="#222222", gid="slo-label")
    bottom, top = ax.get_ylim()
    if ax.get_yscale() == "linear":
        ax.set_ylim(min(bottom, 0), max(top, limit * 1.15))
    else:
        ax.set_ylim(min(bottom, limit / 2), max(top, limit * 2))


def _rate_ticks(ax: Axes) -> None:
    """A log rate axis with plain numbers (0.2, 0.5, 1, 2, 5) and no crowded minor labels."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend(searches: list[tuple[str, pd.Series, pd.DataFrame]]) -> tuple[list, list]:
    handles = [Line2D([], [], color=_color(i), linewidth=1) for i in range(len(searches))]
    labels = [label for label, _, _ in searches]
    handles += [Line2D([], [], marker="o", color="grey", linestyle="none", markersize=5),
                Line2D([], [], marker="x", color=FAILS, linestyle="none", markersize=7),
                Line2D([], [], marker="^", color=FAILS, linestyle="none", markersize=6),
                Line2D([], [], marker="o", markerfacecolor="none", markeredgecolor="grey",
                       markeredgewidth=2, markersize=13, linestyle="none"),
                Line2D([], [], color="#222222", linestyle=(0, (4, 3)))]
    labels += ["probe: every SLO holds", "probe fails (an SLO, or a request starved)",
               "probe stopped once an SLO was lost (no figure)",
               "the answer: the highest rate that holds", "SLO limit"]
    return handles, labels


def read_capacity(folder: Path) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """capacity.json, capacity.csv and capacity_probes.csv of a capacity folder."""
    info = read_json(folder / "capacity.json")
    targets = info.get("slo")
    if not isinstance(targets, list) or not all(
            isinstance(t, dict) and "metric" in t and "limit" in t for t in targets):
        raise KvschedError(f"{folder / 'capacity.json'}: no usable field 'slo'")
    points = [str(a["path"]) for a in info.get("axes") or () if isinstance(a, dict)
              and "path" in a]
    answers = read_csv(folder / "capacity.csv", (*points, "variant", "rate"))
    probes = read_csv(folder / "capacity_probes.csv",
                      (*points, "variant", "rate", "holds",
                       *(str(t["metric"]) for t in targets)))
    return info, answers, probes


def plot_capacity_folder(folder: Path) -> list[Path]:
    """Write capacity.png into a capacity folder."""
    info, answers, probes = read_capacity(folder)
    points = [str(a["path"]) for a in info.get("axes") or ()]
    time_unit = info.get("time_unit")
    figure = draw_capacity(answers, probes, list(info["slo"]),
                           float(info.get("tolerance", 0.02)),
                           str(time_unit) if time_unit else None,
                           f"{folder.name} ({info.get('source', 'scenario')})", points)
    return [save_png(figure, folder / "capacity.png")]
