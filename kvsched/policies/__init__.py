"""Built-in waiting-queue policies, the registry, and loading a user's own policy.

Adding a policy: one small module with a frozen dataclass that has a `key` method, and one
line in `BUILTIN`. A user's own policy needs no registration: name it `package.module:Class`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from dataclasses import dataclass
from typing import Any

from kvsched.policies.base import Policy, SortKey
from kvsched.policies.fcfs import Fcfs
from kvsched.policies.lof import LongestOutputFirst
from kvsched.policies.priority import PriorityFirst
from kvsched.policies.spf import ShortestPromptFirst

BUILTIN: dict[str, type] = {
    "fcfs": Fcfs,
    "spf": ShortestPromptFirst,
    "priority": PriorityFirst,
    "lof": LongestOutputFirst,
}


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    name: str
    params: dict[str, Any]  # parameter name -> default
    summary: str


def _class_for(name: str) -> type:
    if ":" in name:
        module_name, _, class_name = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"cannot import policy module '{module_name}': {exc}") from None
        cls = getattr(module, class_name, None)
        if cls is None:
            raise ValueError(f"module '{module_name}' has no class '{class_name}'")
        return cls
    if name in BUILTIN:
        return BUILTIN[name]
    close = difflib.get_close_matches(name, BUILTIN, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ValueError(
        f"unknown policy '{name}'{hint}; expected one of {', '.join(BUILTIN)} "
        "or package.module:ClassName"
    )


def param_names(name: str) -> list[str]:
    """The parameters a policy accepts (its dataclass fields, or its __init__ arguments)."""
    cls = _class_for(name)
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    import inspect

    sig = inspect.signature(cls)
    return [p for p in sig.parameters if p not in ("self", "args", "kwargs")]


def make_policy(name: str = "fcfs", **params: Any) -> Policy:
    """Build a policy by registry name or `package.module:ClassName`, with its parameters."""
    cls = _class_for(name)
    accepted = param_names(name)
    for key in params:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            expected = ", ".join(accepted) or "none"
            raise ValueError(
                f"policy '{name}' has no parameter '{key}'{hint}; expected: {expected}"
            )
    try:
        policy = cls(**params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"policy '{name}': {exc}") from None
    if not callable(getattr(policy, "key", None)):
        raise ValueError(f"policy '{name}' has no key(request, enqueue_time) method")
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
    "Fcfs",
    "Policy",
    "PolicyInfo",
    "PriorityFirst",
    "ShortestPromptFirst",
    "SortKey",
    "builtin_policies",
    "make_policy",
    "param_names",
]
