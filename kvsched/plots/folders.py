"""`kvsched plot`'s dispatch: the pictures a folder gets by what it holds (a run, a sweep or a
capacity search), drawn by `kvsched.plots.run`, `kvsched.plots.sweep` or
`kvsched.plots.capacity`."""

from __future__ import annotations

from pathlib import Path

from kvsched.errors import KvschedError
from kvsched.plots.capacity import plot_capacity_folder
from kvsched.plots.run import plot_run_folder
from kvsched.plots.sweep import plot_sweep_folder


def plot_folder(folder: Path) -> list[Path]:
    """Draw the pictures of a run folder or a sweep folder; the files written."""
    if not folder.is_dir():
        raise KvschedError(f"{folder}: no such folder")
    if (folder / "sweep.json").is_file():
        return plot_sweep_folder(folder)
    if (folder / "capacity.json").is_file():
        return plot_capacity_folder(folder)
    if (folder / "summary.csv").is_file():
        return plot_run_folder(folder)
    raise KvschedError(f"{folder}: neither a run folder (summary.csv, <variant>/*.csv), a "
                       "sweep folder (sweep.json, summary.csv) nor a capacity folder "
                       "(capacity.json, capacity_probes.csv)")
