"""Lazy public surfaces for packages: a name loads its module on first use (PEP 562).

    __getattr__ = lazy_exports(__name__, {"Batcher": "batcher", ...})

A package's `__init__` states its `__all__` and where each name lives, and importing the
package stays cheap: the Functions worker imports `function_app.py` before any invocation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `name` comes from `package.<homes[name]>`."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{homes[name]}"), name)

    return __getattr__
