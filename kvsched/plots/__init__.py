"""The pictures (PNG, matplotlib's Agg), drawn from the records a run, a sweep or a capacity
search wrote: a run's timelines, TTFT and latency, and what the others share with them
(`run`), a sweep's (`sweep`), a capacity search's (`capacity`), and the choice among them by
what a folder holds (`folders`, for `kvsched plot FOLDER`). The engine and the library's runs
never import this package.

`kvsched.plots` was the module now called `kvsched.plots.run`: its names are still found
here (`from kvsched.plots import plot_run_folder`)."""

from kvsched.plots.run import *  # noqa: F403
