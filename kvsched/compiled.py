"""Which modules have a compiled build, and which build an import takes.

The modules in `COMPILED` are plain Python that Cython also compiles (setup.py), typed by the
`.pxd` file beside each: one source, two builds, the same bytes. An import takes the compiled
build when it is there and newer than its source and its `.pxd` (a build older than an edit
is never run: the source is, until `make install` builds again), and the source when
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

COMPILED = ("kvsched.kvcache.hashed", "kvsched.kvcache.radix")
"""The modules built by Cython from their own source (setup.py reads this tuple)."""


def _pure() -> bool:
    return os.environ.get("KVSCHED_PURE", "") not in ("", "0")


def fresh(binary: str | os.PathLike[str], sources: Sequence[str | os.PathLike[str]]) -> bool:
    """Whether a compiled build at `binary` is at least as new as each existing source."""
    built = os.stat(binary).st_mtime
    return all(built >= os.stat(source).st_mtime for source in sources
               if os.path.exists(source))


class _Finder:
    """Takes the source of a compiled module whose build is missing, stale or not wanted (a
    meta path finder; importlib.abc's base class is left out: importing it costs 20 ms)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or not isinstance(
                spec.loader, importlib.machinery.ExtensionFileLoader):
            return spec  # only the source is there
        stem = os.path.join(os.path.dirname(spec.origin), fullname.rpartition(".")[2])
        source = stem + ".py"
        if not _pure() and fresh(spec.origin, (source, stem + ".pxd")):
            return spec
        return importlib.util.spec_from_file_location(fullname, source)


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
