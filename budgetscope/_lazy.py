"""Lazy package exports: a name is imported from its submodule on first use, then kept in the package."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """A module `__getattr__` that imports `package.<exports[name]>` on first access of `name` (a dotted
    module name is taken as absolute)."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
