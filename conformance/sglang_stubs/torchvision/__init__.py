"""Stand-in for torchvision: sglang's model configs import it, its scheduler never calls it
(see ../README.md).

Every attribute is a placeholder class and every submodule (``torchvision.transforms``, ...)
is made on demand, so import-time references such as ``T.Compose`` or
``InterpolationMode.BICUBIC`` resolve; the scheduling path never calls any of them.
"""

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any


class _Placeholder(type):
    """A class whose attributes are placeholders too (``InterpolationMode.BICUBIC``)."""

    def __getattr__(cls, name: str) -> "_Placeholder":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {})


def _module_getattr(name: str) -> _Placeholder:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _Finder())
__getattr__ = _module_getattr
