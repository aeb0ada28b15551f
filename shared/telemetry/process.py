"""Which telemetry this process set up (light: the per-request path asks, OpenTelemetry stays unloaded).

`Installed` is what the request and queue paths use of it; shared/telemetry/setup.py's `Telemetry`
is the one that satisfies it (tests install one with in-memory readers and span exporters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind

__all__ = ["Installed", "current", "install"]


class Installed(Protocol):
    """The process's telemetry as the request path sees it: its sampling ratio, a span, stage spans."""

    ratio: float

    def span(
        self,
        name: str,
        *,
        kind: SpanKind = ...,
        traceparent: str | None = None,
        tracestate: str | None = None,
        context: Context | None = None,
        start_ns: int | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> Span: ...

    def stage_spans(self, parent: Span, start_ns: int, timings_ms: dict[str, float]) -> None: ...


_current: Installed | None = None


def current() -> Installed | None:
    """The telemetry set up for this process, if any."""
    return _current


def install(telemetry: Installed | None) -> None:
    """Make `telemetry` the process's (tests: one with in-memory readers and span exporters; None: none)."""
    global _current
    _current = telemetry
