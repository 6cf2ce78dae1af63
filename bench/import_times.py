"""What `kvsched run` pays to start: each module's import time after the ones before it, in
one fresh process (`python bench/import_times.py [MODULE ...]`). The default list follows the
order a run imports them in, libraries first; `-X importtime` gives the same picture, module
by module."""

from __future__ import annotations

import importlib
import sys
import time

DEFAULT = ("typer", "kvsched.cli", "pydantic.main", "typer._adapters", "numpy", "yaml",
           "tabulate", "kvsched.schema", "kvsched.scenario", "kvsched.runner")


def main() -> None:
    names = sys.argv[1:] or DEFAULT
    start = last = time.perf_counter()
    for name in names:
        importlib.import_module(name)
        now = time.perf_counter()
        print(f"{name:24s} {1000 * (now - last):7.1f} ms")
        last = now
    print(f"{'total':24s} {1000 * (last - start):7.1f} ms")


if __name__ == "__main__":
    main()
