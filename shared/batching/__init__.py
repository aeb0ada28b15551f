"""Micro-batching: `Batcher` owns queue, window and futures; `rows` owns tensor shapes.

Importing the package is light: `rows` (and numpy) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

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


__getattr__ = lazy_exports(__name__, _HOMES)  # NOTE: PEP 562: a submodule loads when its name is first used
