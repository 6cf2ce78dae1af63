"""The compiled build, optional on every machine (without a compiler the same source runs):

- the modules of `kvsched.compiled.COMPILED`, compiled by Cython from their own Python
  source, typed by the `.pxd` beside each;
- `kvsched._fastcore`, the C loop of the lesson's engine and its CSV text (`kvsched.fastcore`).

No fused multiply-adds in either: their floats are Python's.
"""

import ast
import os
from pathlib import Path

from setuptools import Extension, setup

FLAGS = ["-ffp-contract=off"]
CYTHON_FLAGS = [*FLAGS, "-O1", "-g0"]
"""The Cython modules' C is mostly calls into Python's C API: -O1 without debug info builds
in half the time of Python's -O3 -g (what CI pays on every clean clone), no slower here."""


def compiled_modules() -> tuple[str, ...]:
    """`COMPILED` as kvsched/compiled.py writes it (read, not imported: nothing is built)."""
    tree = ast.parse(Path(__file__).with_name("kvsched").joinpath("compiled.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED":
            return ast.literal_eval(node.value)
    raise RuntimeError("kvsched/compiled.py has no COMPILED tuple")


def remove_stale_builds() -> None:
    """Delete the builds of modules that are no longer compiled (moved into a package, or
    dropped): an extension file left at a module's old path is dead weight, and would be
    imported by a checkout without the old-path table (`kvsched/_moved.py`)."""
    wanted = {name.replace(".", "/") for name in compiled_modules()} | {"kvsched/_fastcore"}
    for path in Path(__file__).with_name("kvsched").rglob("*"):
        if path.suffix not in (".so", ".pyd"):
            continue
        stem = path.relative_to(Path(__file__).parent).as_posix().split(".")[0]
        if stem not in wanted:
            path.unlink()
            generated = path.parent / (path.name.split(".")[0] + ".c")
            if generated.exists():
                generated.unlink()


def extensions() -> list[Extension]:
    out = [Extension("kvsched._fastcore", ["kvsched/_fastcore.c"], optional=True,
                     extra_compile_args=FLAGS)]
    try:
        from Cython.Build import cythonize
    except ImportError:  # (a build without Cython: the modules run from their source)
        return out
    modules = [Extension(name, [name.replace(".", "/") + ".py"], optional=True,
                         extra_compile_args=CYTHON_FLAGS) for name in compiled_modules()]
    return out + cythonize(modules, language_level=3, quiet=True, nthreads=JOBS,
                           compiler_directives={"binding": False, "annotation_typing": False,
                                                "embedsignature": False})


JOBS = os.cpu_count() or 1
"""Modules translated and compiled at once (a pip install builds them one by one else)."""

remove_stale_builds()
setup(ext_modules=extensions(), options={"build_ext": {"parallel": JOBS}})
