"""The old import paths of modules that moved into a package, and the finder that keeps them
working.

`MOVED` maps each old dotted name to the module that now holds its code: `import
kvsched.capacity` gives the very module object `kvsched.analysis.capacity` (so a test's
monkeypatch on either name reaches the code, and `from kvsched.capacity import
run_capacity` gets the same function), and nothing is imported before an old name is asked
for. New code imports the new path; an old path stays here as long as branches and scripts
written before the move may still use it.

A moved module is written once, at its new path: no file stands at the old one. The
compiled modules are cimported by their real paths only (a `.pxd` never names an old one):
Cython resolves a cimport from the files, not through this table.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

MOVED = {
    "kvsched.cli_app": "kvsched.cli.shared",
    "kvsched.cli_capacity": "kvsched.cli.capacity",
    "kvsched.cli_progress": "kvsched.cli.progress",
    "kvsched.capacity": "kvsched.analysis.capacity",
    "kvsched.capacity_grid": "kvsched.analysis.capacity_grid",
    "kvsched.slo_watch": "kvsched.analysis.slo_watch",
    "kvsched.sweep": "kvsched.analysis.sweep",
    "kvsched.loop": "kvsched.cluster.loop",
    "kvsched.cluster_run": "kvsched.cluster.run",
    "kvsched.conformance": "kvsched.decisions",
    "kvsched.pd": "kvsched.cluster.pd",
    "kvsched.transfer": "kvsched.cluster.transfer",
    "kvsched.csvout": "kvsched.records.csvout",
    "kvsched.diagnosis": "kvsched.records.diagnosis",
    "kvsched.analysis.diagnosis": "kvsched.records.diagnosis",
    "kvsched.fastcsv": "kvsched.records.fastcsv",
    "kvsched.floatfmt": "kvsched.records.floatfmt",
    "kvsched.metric_names": "kvsched.records.metric_names",
    "kvsched.metrics": "kvsched.records.metrics",
    "kvsched.record_mode": "kvsched.records.mode",
    "kvsched.record_table": "kvsched.records.table",
    "kvsched.steplog": "kvsched.records.steplog",
    "kvsched.plot_folders": "kvsched.plots.folders",
    "kvsched.plots_capacity": "kvsched.plots.capacity",
    "kvsched.plots_sweep": "kvsched.plots.sweep",
    "kvsched.hardware": "kvsched.timing.hardware",
    "kvsched.kvpool": "kvsched.timing.kvpool",
    "kvsched.profiled": "kvsched.timing.profiled",
    "kvsched.roofline": "kvsched.timing.roofline",
    "kvsched.serve_defaults": "kvsched.timing.serve_defaults",
    "kvsched.stepfit": "kvsched.timing.stepfit",
    "kvsched.trace_csv": "kvsched.workload.trace_csv",
    "kvsched.workload.formats": "kvsched.trace_formats",
    "kvsched.trace_notes": "kvsched.workload.trace_notes",
}
"""Old dotted name -> the module that holds its code now (an old name may point at another
old name's new home, never at an old name)."""


class _Alias:
    """Answers an old name with its new module (a meta path finder and its loader;
    importlib.abc's base classes are left out, as in `kvsched.compiled`: importing them costs
    20 ms). The import system gives the module it creates the alias's spec; `exec_module`
    hands the module its own back, so it still knows where it was loaded from."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None and spec.loader_state is not None:
            module.__spec__ = spec.loader_state


def install() -> None:
    """Put the finder ahead of the others (once): an old name is answered from the table even
    where a stale build still lies at its old path."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
