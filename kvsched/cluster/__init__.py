"""The loops and what runs several replicas: the loop of one engine (`loop`), N replicas
behind a router on one clock (`replicas`), a `cluster:` variant built, run and written
(`run`), prefill/decode disaggregation (`pd`) and the links that carry its KV (`transfer`).
The routers stay in `kvsched.routers`, one file each.

`kvsched.cluster` was the module now called `kvsched.cluster.replicas`: its names are still
found here (`from kvsched.cluster import run_cluster`), imported on first use, so that
importing one submodule (the schema reads `pd`) does not import the engine."""

from __future__ import annotations

from importlib import import_module
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module 'kvsched.cluster' has no attribute {name!r}")
    value = getattr(import_module("kvsched.cluster.replicas"), name)
    globals()[name] = value
    return value
