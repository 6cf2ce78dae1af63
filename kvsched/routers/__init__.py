"""Routers: which replica of a cluster serves each request (`cluster: {router: ...}`).

Adding a router: one module with a class that has a `route(request, replicas) -> int`
method, and one line in `BUILTIN`. A user's own router needs no registration: name it
`package.module:Class`; it is imported only when a run starts, never while validating.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvsched.plugins import import_user_module
from kvsched.routers.base import EngineView, Router, RouterBase, RouteRequest
from kvsched.routers.least_kv import LeastKv
from kvsched.routers.least_outstanding import LeastOutstanding
from kvsched.routers.prefix_aware import PrefixAware
from kvsched.routers.random import RandomRouter
from kvsched.routers.round_robin import RoundRobin
from kvsched.routers.session import Session

BUILTIN: dict[str, type] = {
    "round_robin": RoundRobin,
    "random": RandomRouter,
    "least_outstanding": LeastOutstanding,
    "least_kv": LeastKv,
    "prefix_aware": PrefixAware,
    "session": Session,
}

_USER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

__all__ = ["BUILTIN", "EngineView", "RouteRequest", "Router", "RouterBase", "check_router",
           "load_router", "make_router"]


def check_router(name: str, params: dict[str, Any]) -> None:
    """Refuse an unknown router or bad parameters (ValueError), importing no user code:
    a `package.module:Class` name is only checked for its shape."""
    if ":" in name:
        if not _USER.match(name):
            raise ValueError(f"router '{name}': expected package.module:ClassName")
        return
    _build(_builtin(name), name, params)


def make_router(name: str, params: dict[str, Any], num_replicas: int,
                rng: np.random.Generator, search_path: Sequence[Path] = ()) -> Router:
    """The router `name` with `params`, bound to the cluster (see `RouterBase.bind`); a
    user's module is imported from `sys.path` or, failing that, the `search_path` folders."""
    cls = _user_class(name, search_path) if ":" in name else _builtin(name)
    router = _build(cls, name, params)
    bind = getattr(router, "bind", None)
    if callable(bind):
        bind(num_replicas, rng)
    return router


def load_router(name: str, search_path: Sequence[Path] = ()) -> type:
    """The class `name` stands for (a user's module imported), checked to be a class with a
    `route` method; nothing of it is called. For refusing a bad router before a run."""
    return _user_class(name, search_path) if ":" in name else _builtin(name)


def _builtin(name: str) -> type:
    if name in BUILTIN:
        return BUILTIN[name]
    close = difflib.get_close_matches(name, BUILTIN, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(f"unknown router '{name}'{hint}; expected one of {', '.join(BUILTIN)} "
                     "or package.module:ClassName")


def _user_class(name: str, search_path: Sequence[Path]) -> type:
    module_name, _, class_name = name.partition(":")
    module = import_user_module(module_name, search_path, "router")
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"module '{module_name}' has no class '{class_name}'")
    # Check the shape before calling anything of the user's (its constructor included).
    if not inspect.isclass(cls):
        raise ValueError(f"router '{name}' is not a class")
    if not callable(inspect.getattr_static(cls, "route", None)):
        raise ValueError(f"router '{name}' has no route(request, replicas) method")
    return cls


def _build(cls: type, name: str, params: dict[str, Any]) -> Any:
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"router '{name}': {exc}") from None
