"""Payload shape for batches: stack feature rows into one tensor, split the output back.

Kept apart from `batcher.py` so the concurrency logic never sees a tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.errors import BatchShapeError

__all__ = ["split_rows", "stack_rows"]

Rows = npt.NDArray[np.float32]


def stack_rows(rows: Sequence[Rows]) -> Rows:
    """One `(n, width)` float32 tensor from `n` equal-width rows."""
    if not rows:
        raise BatchShapeError("cannot stack an empty batch")
    try:
        matrix = np.array(rows, dtype=np.float32)  # not np.stack (docs/benchmark.md)
    except ValueError as exc:
        raise BatchShapeError(f"rows of unequal width: {exc}") from exc
    if matrix.ndim != 2:
        raise BatchShapeError(f"rows must be 1-D and of one width, got shape {matrix.shape}")
    return matrix


def split_rows(output: npt.NDArray[np.generic], expected: int) -> list[npt.NDArray[np.generic]]:
    """The per-request rows of a batch output; its first axis must match the input's."""
    if output.ndim == 0 or output.shape[0] != expected:
        raise BatchShapeError(f"model returned {output.shape[:1] or '()'} rows for {expected} inputs")
    return list(output)
