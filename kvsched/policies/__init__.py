"""Built-in waiting-queue policies, the registry, and loading a user's own policy.

Adding a policy: one small module with a frozen dataclass that has a `key` method (a static
policy) or an `order` method (a dynamic one, re-ranking the queue every step), and one line in
`BUILTIN`. A user's own policy needs no registration: name it `package.module:Class`.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import re
from collections.abc import Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kvsched.errors import excerpt
from kvsched.plugins import import_user_module, load
from kvsched.policies.base import DynamicPolicy, Policy, SortKey, StaticPolicy, is_dynamic


class _Registry(MutableMapping[str, type]):
    """Policy classes by name, each module imported when its class is first asked for: a
    run imports the policy it uses (importing all eight was 5 ms of every start). A class
    put in it is used as it is."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = dict(paths)  # name -> "module:Class"
        self._classes: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        cls = self._classes.get(name)
        if cls is None:
            cls = self._classes[name] = load(self._paths[name])
        return cls

    def __setitem__(self, name: str, cls: type) -> None:
        self._paths[name] = f"{cls.__module__}:{cls.__qualname__}"
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._paths[name]
        self._classes.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


_BUILTIN_PATHS = {
    "fcfs": "kvsched.policies.fcfs:Fcfs",
    "spf": "kvsched.policies.spf:ShortestPromptFirst",
    "priority": "kvsched.policies.priority:PriorityFirst",
    "lof": "kvsched.policies.lof:LongestOutputFirst",
    "random": "kvsched.policies.random:Random",
    "lpm": "kvsched.policies.lpm:LongestPrefixMatch",
    "dfs-weight": "kvsched.policies.dfs_weight:DfsWeight",
    "hrrn": "kvsched.policies.hrrn:HighestResponseRatio",
}
BUILTIN: MutableMapping[str, type] = _Registry(_BUILTIN_PATHS)

_CLASS_NAMES = {path.rpartition(":")[2]: name for name, path in _BUILTIN_PATHS.items()}


def __getattr__(name: str) -> type:
    """The built-in classes, importable from here as before (`from kvsched.policies import
    Fcfs`), each loaded when first named."""
    if name in _CLASS_NAMES:
        return BUILTIN[_CLASS_NAMES[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_CLASS_NAMES})


_SHAPE = "key(request, enqueue_time) or order(seqs, now, view) method"


class PolicyInfo(NamedTuple):
    """A built-in policy as `kvsched policies` lists it: its name, its parameters with their
    defaults, and its docstring."""

    name: str
    params: dict[str, Any]  # parameter name -> default
    summary: str


_USER_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_user_policy(name: str) -> bool:
    """Whether `name` names a user's class (`package.module:Class`) rather than a built-in."""
    return ":" in name


def check_policy_name(name: str) -> None:
    """Check a policy name without importing anything: a built-in, or the shape
    `package.module:Class` (what that names is only checked when it is loaded)."""
    if is_user_policy(name):
        if not _USER_NAME.fullmatch(name):
            raise ValueError(f"expected package.module:ClassName (Python identifiers), "
                             f"got '{excerpt(name)}'")
        return
    _class_for(name)


def _class_for(name: str, search_path: Sequence[Path] = ()) -> type:
    if is_user_policy(name):
        return _user_class(name, search_path)
    if name in BUILTIN:
        return BUILTIN[name]
    close = difflib.get_close_matches(name, BUILTIN, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(
        f"unknown policy '{excerpt(name)}'{hint}; expected one of {', '.join(BUILTIN)} "
        "or package.module:ClassName"
    )


def _user_class(name: str, search_path: Sequence[Path]) -> type:
    """Import `package.module` (also from the folders in `search_path`, e.g. the scenario's)
    and return its class `Class`, checked to be a class with a `key` or an `order` method
    (static or dynamic) before anything
    of it is called. Importing runs the module's code, with the user's rights."""
    check_policy_name(name)
    module_name, _, class_name = name.partition(":")
    module = import_user_module(module_name, search_path, "policy")
    cls = inspect.getattr_static(module, class_name, None)
    if cls is None:
        raise ValueError(f"module '{module_name}' has no class '{class_name}'")
    if not isinstance(cls, type):
        raise ValueError(f"'{name}' is {type(cls).__name__}, not a class; a policy is a class "
                         f"with a {_SHAPE}")
    if not any(callable(inspect.getattr_static(cls, method, None))
               for method in ("key", "order")):
        raise ValueError(f"'{name}' has no {_SHAPE}, so it is not a policy")
    return cls


def param_names(name: str, search_path: Sequence[Path] = ()) -> list[str]:
    """The parameters a policy accepts (its dataclass fields, or its __init__ arguments)."""
    cls = _class_for(name, search_path)
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    sig = inspect.signature(cls)
    return [p for p in sig.parameters if p not in ("self", "args", "kwargs")]


def make_policy(name: str = "fcfs", /, search_path: Sequence[Path] = (), **params: Any) -> Policy:
    """Build a policy by registry name or `package.module:ClassName`, with its parameters;
    a user's module is imported from `sys.path` or, failing that, the `search_path` folders."""
    cls = _class_for(name, search_path)
    accepted = param_names(name, search_path)
    for key in params:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            expected = ", ".join(accepted) or "none"
            raise ValueError(
                f"policy '{name}' has no parameter '{excerpt(key)}'{hint}; expected: {expected}"
            )
    try:
        policy = cls(**params)
    except Exception as exc:  # noqa: BLE001 - a user's constructor may raise anything
        raise ValueError(f"policy '{name}': {type(exc).__name__}: {excerpt(exc, 200)}") from None
    if not (callable(getattr(policy, "key", None)) or is_dynamic(policy)):
        raise ValueError(f"policy '{name}' has no {_SHAPE}")
    return policy


def builtin_policies() -> list[PolicyInfo]:
    """Every built-in policy with its parameters and defaults, for `kvsched policies`."""
    infos = []
    for name, cls in BUILTIN.items():
        params = {f.name: f.default for f in dataclasses.fields(cls)}
        doc = (cls.__doc__ or "").strip()
        infos.append(PolicyInfo(name, params, doc))
    return infos


__all__ = [
    "BUILTIN",
    "DfsWeight",
    "DynamicPolicy",
    "Fcfs",
    "HighestResponseRatio",
    "LongestPrefixMatch",
    "Policy",
    "PolicyInfo",
    "PriorityFirst",
    "ShortestPromptFirst",
    "SortKey",
    "StaticPolicy",
    "builtin_policies",
    "check_policy_name",
    "is_dynamic",
    "is_user_policy",
    "make_policy",
    "param_names",
]
