"""Micro-batching: `Batcher` owns queue, window and futures; `rows` owns tensor shapes.

Importing the package is light: `rows` (and numpy) loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.batching.batcher import Batcher, BatcherClosed, Completed
    from shared.batching.rows import split_rows, stack_rows

__all__ = ["Batcher", "BatcherClosed", "Completed", "split_rows", "stack_rows"]

_HOMES = {
    "Batcher": "batcher",
    "BatcherClosed": "batcher",
    "Completed": "batcher",
    "split_rows": "rows",
    "stack_rows": "rows",
}


def __getattr__(name: str) -> Any:  # NOTE: PEP 562: a submodule loads when its name is first used
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
