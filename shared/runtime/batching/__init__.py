"""Micro-batching: `batcher` owns queue, window and futures; `rows` owns tensor shapes."""
