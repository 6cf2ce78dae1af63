"""Which modules have a compiled build, and which build an import takes.

The modules in `COMPILED` are plain Python that Cython also compiles (setup.py), typed by the
`.pxd` file beside each: one source, two builds, the same bytes. An import takes the compiled
builds when every one is there and newer than its source and its `.pxd` (a build older than
an edit is never run: the sources are, until `make install` builds again), and the sources when
`KVSCHED_PURE=1` is set (to compare the two, or on a machine without a compiler, where only
the source exists). `installed()` says which build each module runs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

COMPILED = ("kvsched.kvcache.hashed",
            "kvsched.kvcache.radix",
            "kvsched.sequence",
            "kvsched.blocks",
            "kvsched.engine.plan",
            "kvsched.histogram",
            "kvsched.engine.gaps",
            "kvsched.waiting",
            "kvsched.prefix",
            "kvsched.reservation",
            "kvsched.engine.future_tokens",
            "kvsched.engine.mechanism",
            "kvsched.engine.rules.lesson",
            "kvsched.engine.rules.vllm_v0",
            "kvsched.engine.rules.vllm_v0_chunked",
            "kvsched.engine.rules.vllm_v1",
            "kvsched.backpressure",
            "kvsched.records.steplog",
            "kvsched.engine.stretch",
            "kvsched.engine.head_of_line",
            "kvsched.engine.arrivals",
            "kvsched.engine.replica",
            "kvsched.turns",
            "kvsched.timing.roofline",
            "kvsched.floatsum",
            "kvsched.kvcache.tracker",
            "kvsched.cluster.loop",
            "kvsched.cluster.replicas")
"""The modules built by Cython from their own source (setup.py reads this tuple)."""


class PurePython:
    """What `import cython` stands for in a compiled module's source run as plain Python on
    a machine without Cython (the compiler's own `cython` module is only there where it is
    installed): not compiled. Such a source takes C's functions in its compiled build
    (declared in its `.pxd`) and Python's where it runs as Python:

        try:
            import cython
        except ImportError:
            from kvsched.compiled import PurePython as cython
        if not cython.compiled:
            from math import log
    """

    compiled = False

    @staticmethod
    def cast(kind: type, value: Any) -> Any:
        """`cython.cast` as Cython's own pure-Python module does it for a Python type: the
        value itself when it is one already (compiled: a C cast, no check, no copy)."""
        return value if isinstance(value, kind) else kind(value)


def _pure() -> bool:
    return os.environ.get("KVSCHED_PURE", "") not in ("", "0")


def fresh(binary: str | os.PathLike[str], sources: Sequence[str | os.PathLike[str]]) -> bool:
    """Whether a compiled build at `binary` is at least as new as each existing source."""
    built = os.stat(binary).st_mtime
    return all(built >= os.stat(source).st_mtime for source in sources
               if os.path.exists(source))


class _Finder:
    """Takes the source of every compiled module when any build is missing, stale or not
    wanted: the builds cimport each other's types (a compiled scheduler takes a compiled
    `Seq`), so they run all together or not at all (a meta path finder; importlib.abc's
    base class is left out: importing it costs 20 ms)."""

    def __init__(self) -> None:
        self._builds: bool | None = None  # whether the builds run (decided at first import)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            return spec
        if self._builds is None:
            self._builds = not _pure() and _all_fresh(spec.origin, fullname)
        if self._builds or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return spec
        source = os.path.join(os.path.dirname(spec.origin), fullname.rpartition(".")[2] + ".py")
        return importlib.util.spec_from_file_location(fullname, source)


def _all_fresh(origin: str, fullname: str) -> bool:
    """Whether every module of COMPILED has a build at least as new as its source and
    types (`origin`: where `fullname` was found, which locates the package)."""
    root = os.path.dirname(origin)
    for _ in range(fullname.count(".")):
        root = os.path.dirname(root)
    for name in COMPILED:
        stem = os.path.join(root, *name.split("."))
        binaries = [stem + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES
                    if os.path.exists(stem + suffix)]
        if not binaries or not fresh(binaries[0], (stem + ".py", stem + ".pxd")):
            return False
    return True


def install() -> None:
    """Put the finder ahead of the others (once)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def installed() -> dict[str, str]:
    """Each compiled module's build as imported now: "compiled" or "source"."""
    out = {}
    for name in COMPILED:
        module = importlib.import_module(name)
        origin = getattr(module, "__file__", "") or ""
        out[name] = "source" if origin.endswith(".py") else "compiled"
    return out
