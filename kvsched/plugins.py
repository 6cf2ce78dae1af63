"""A user's module named `package.module:Class` (a policy or a router), imported once and
the same way for both: from `sys.path` first, then from the folders given (the scenario's),
any exception of the user's code as one line. And kvsched's own registries' "module:name"
entries, loaded when first used (`load`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kvsched.errors import excerpt


def load(path: str) -> Any:
    """What a registry's "module:name" entry names (kvsched's own modules: the policies',
    the prefix caches', a trace format's reader), importing its module when first asked."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def import_user_module(module_name: str, search_path: Sequence[Path], what: str) -> ModuleType:
    """The module, or ValueError("cannot import <what> module ...: <its error>")."""
    extra = [str(Path(folder).resolve()) for folder in search_path]
    extra = [folder for folder in dict.fromkeys(extra) if folder not in sys.path]
    sys.path.extend(extra)  # after the user's own path: a folder never shadows a module
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a user's module may raise anything
        raise ValueError(f"cannot import {what} module '{module_name}': "
                         f"{type(exc).__name__}: {excerpt(exc, 200)}") from None
    finally:
        for folder in extra:
            sys.path.remove(folder)
