"""Stand-in for torchvision: sglang's model configs import it, its scheduler never calls it (see ../README.md).

Every attribute is a placeholder class and every submodule (``torchvision.transforms.functional``, ...)
is made on demand, so import-time references such as ``T.Compose`` or ``InterpolationMode.BICUBIC``
resolve; calling anything real would fail loudly, which the scheduling path never does.
"""

import importlib.abc
import importlib.machinery
import sys
import types


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
    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = types.ModuleType(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        module.__getattr__ = _module_getattr  # type: ignore[method-assign]
        return module

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        return None


sys.meta_path.insert(0, _Finder())
__getattr__ = _module_getattr
