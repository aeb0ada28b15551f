"""Observability: every stage measured, traced and alertable.

    catalogue   every instrument: name, kind, unit, attributes (standard library only)
    metrics     the in-process series the hot path records into, and the recording API
    tracing     W3C trace context and the sampling decision, before any span exists
    logs        JSON lines; one rate-limited line per rejected input
    process     which Telemetry this process set up (light)
    asgi        the HTTP middleware: request duration, one span per sampled request
    bridge      the series as OpenTelemetry metrics, for every reader (heavy)
    setup       set up once: meter provider, Prometheus, tracer, Azure Monitor (heavy)

Importing `shared.telemetry` loads nothing of OpenTelemetry: `setup` and `bridge` load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

if TYPE_CHECKING:
    from shared.telemetry.bridge import InMemoryReader
    from shared.telemetry.process import current, install, uninstall
    from shared.telemetry.setup import Telemetry, configure

__all__ = ["InMemoryReader", "Telemetry", "configure", "current", "install", "uninstall"]

_HOMES = {
    "InMemoryReader": "bridge",
    "Telemetry": "setup",
    "configure": "setup",
    "current": "process",
    "install": "process",
    "uninstall": "process",
}

__getattr__ = lazy_exports(__name__, _HOMES)
