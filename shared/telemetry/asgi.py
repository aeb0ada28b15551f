"""The HTTP middleware: each request's duration by route, method, status and answer source;
one span per sampled request, with a child per stage of a scored event.

Per request, unsampled (the common case): two clock reads, a scan of the headers for
`traceparent`, one random draw, and one histogram record. A score endpoint leaves
its `Scored` in `scope["scoring"]`, where the source and stage timings are read.

`hosted=True` (under the Functions host): the host already records the request (App
Insights `requests`), so the span here is INTERNAL, and its parent is the context the
Python worker attached for the invocation (PYTHON_ENABLE_OPENTELEMETRY=true), which
continues the caller's `traceparent`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from random import random
from typing import Any

from shared.telemetry import metrics, process
from shared.telemetry.tracing import sampled

__all__ = ["Measured"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGI = Callable[[Scope, Receive, Send], Awaitable[None]]


class Measured:
    """Wraps an ASGI app; `enabled()` is asked once, on the first request (settings are lazy)."""

    def __init__(self, app: ASGI, enabled: Callable[[], bool], *, hosted: bool = False) -> None:
        self.app = app
        self._enabled = enabled
        self._on: bool | None = None
        self.hosted = hosted

    @property
    def on(self) -> bool:
        """Whether requests are measured (asked once; invalid settings: not yet)."""
        if self._on is None:
            try:
                self._on = bool(self._enabled())
            except Exception:  # invalid settings: the app answers why; measure nothing yet
                return False
        return self._on

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.on:
            await self.app(scope, receive, send)
            return
        started, span = self.begin(scope)
        status = 500

        async def sending(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.end(scope, status, started, span)

    def begin(self, scope: Scope) -> tuple[float, Any]:
        """A request starts: its clock, and its span when it is sampled (else None).

        A route that knows its own status (`FastPath`, shared/adapters/http/app.py) calls
        `begin` and `end` itself, without the `send` wrapper.
        """
        started = time.perf_counter()
        telemetry = process.current()
        if telemetry is None:
            return started, None
        parent = _header(scope, b"traceparent")
        if parent is None and not self.hosted:  # the common case, the rule of `sampled` inlined
            return started, (_start(telemetry, scope, None, None, False) if random() < telemetry.ratio else None)  # noqa: S311
        context = _worker_context() if self.hosted else None
        if sampled(parent if context is None else _context_traceparent(context), telemetry.ratio):
            return started, _start(telemetry, scope, parent, context, self.hosted)
        return started, None

    def end(self, scope: Scope, status: int, started: float, span: Any) -> None:
        """The request ended with `status`: record it, and finish its span."""
        seconds = time.perf_counter() - started
        template = getattr(scope.get("route"), "path", "").rstrip("/")
        scored = scope.get("scoring")
        metrics.request(scope["method"], template, status, getattr(scored, "source", ""), seconds)
        if span is not None:
            telemetry = process.current()
            if telemetry is not None:
                _finish(telemetry, span, scope["method"], template, status, scored, seconds)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _worker_context() -> Any:
    """The OpenTelemetry context the Functions worker attached to this invocation, if valid."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    ctx = otel_context.get_current()
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _context_traceparent(context: Any) -> str:
    from opentelemetry import trace

    from shared.telemetry.setup import traceparent_of

    return traceparent_of(trace.get_current_span(context))


def _start(telemetry: Any, scope: Scope, parent: str | None, context: Any, hosted: bool) -> Any:
    from opentelemetry.trace import SpanKind

    method = scope["method"]
    return telemetry.span(
        f"{method} {scope['path']}",
        kind=SpanKind.INTERNAL if hosted else SpanKind.SERVER,
        traceparent=parent,
        tracestate=_header(scope, b"tracestate"),
        context=context,
        attributes={"http.request.method": method, "url.path": scope["path"]},
    )


def _finish(telemetry: Any, span: Any, method: str, template: str, status: int, scored: Any, seconds: float) -> None:
    from opentelemetry.trace import StatusCode

    if not span.is_recording():
        # a tracer provider the app did not configure (the Functions worker's azure-monitor
        # setup, with its own sampler) hands out non-recording spans: they have no `name` to read
        # and record nothing, so only their end is due.
        span.end()
        return
    span.set_attribute("http.route", template)
    span.set_attribute("http.response.status_code", status)
    if template:
        span.update_name(f"{method} {template}")
    if status >= 500:
        span.set_status(StatusCode.ERROR)
    if scored is not None:
        span.set_attribute("scoring.model", scored.model)
        span.set_attribute("scoring.model.version", scored.model_version)
        span.set_attribute("scoring.source", scored.source)
        end = time.time_ns()
        telemetry.stage_spans(span, end - int(seconds * 1e9), scored.timings_ms)
    span.end()
