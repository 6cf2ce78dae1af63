"""The picture of a capacity search: each SLO metric against the request rate tried."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from kvsched.capacity import Capacity, SloTarget


def draw_capacity(results: Sequence[Capacity], targets: Sequence[SloTarget]) -> Figure:
    """One panel per SLO: every probe of every search (metric vs rate), the limit as a
    dashed line, each answer as a filled marker."""
    figure = Figure(figsize=(6.5, 3.2 * len(targets)))
    axes = figure.subplots(len(targets), 1, squeeze=False)[:, 0]
    for i, (ax, target) in enumerate(zip(axes, targets, strict=True)):
        for result in results:
            label = result.variant + "".join(f" {k}={v}" for k, v in result.point.items())
            probes = sorted((p for p in result.probes if p.values[i] is not None),
                            key=lambda p: p.rate)
            line, = ax.plot([p.rate for p in probes], [p.values[i] for p in probes],
                            marker=".", label=label)
            best = result.probe_at(result.scale)
            if best is not None and best.values[i] is not None:
                ax.plot([best.rate], [best.values[i]], "o", color=line.get_color())
        ax.axhline(target.limit, linestyle="--", color="grey")
        ax.set_xscale("log")
        ax.set_ylabel(target.metric)
        ax.set_xlabel("request rate")
        ax.legend(fontsize="small")
    figure.tight_layout()
    return figure
