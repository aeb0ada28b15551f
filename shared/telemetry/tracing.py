"""W3C trace context, and the sampling decision made before any span exists.

An SDK span is costly to start and end (docs/benchmark.md), so the decision comes first, by the
parent-based ratio rule: a parent's sampled flag is honoured (in a `traceparent` header
or message property, or the context the Functions worker attached), and a request
without one is traced with probability TRACE_SAMPLE_RATIO. Unsampled work creates no
span at all; its incoming context still travels on (the queue path copies it).
"""

from __future__ import annotations

import random

__all__ = ["format_traceparent", "parse_traceparent", "sampled"]

_HEX = frozenset("0123456789abcdef")


def parse_traceparent(value: str | None) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) of a version-00 `traceparent`, else None."""
    if not value or len(value) < 55:
        return None
    version, trace_id, span_id, flags = value[:2], value[3:35], value[36:52], value[53:55]
    if value[2] != "-" or value[35] != "-" or value[52] != "-" or version == "ff":
        return None
    if not set(trace_id + span_id + flags + version) <= _HEX:
        return None
    trace, span = int(trace_id, 16), int(span_id, 16)
    if not trace or not span:
        return None
    return trace, span, bool(int(flags, 16) & 1)


def format_traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def sampled(traceparent: str | None, ratio: float, draw: float | None = None) -> bool:
    """Whether to trace: the parent's flag when there is a valid parent, else a draw under `ratio`."""
    parent = parse_traceparent(traceparent) if traceparent else None
    if parent is not None:
        return parent[2]
    return (random.random() if draw is None else draw) < ratio  # noqa: S311 trace sampling, not a secret
