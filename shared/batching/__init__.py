"""Micro-batching: `Batcher` owns queue, window and futures; `rows` owns tensor shapes."""

from shared.batching.batcher import Batcher, BatcherClosed, Completed
from shared.batching.rows import split_rows, stack_rows

__all__ = ["Batcher", "BatcherClosed", "Completed", "split_rows", "stack_rows"]
