"""Which `Telemetry` this process set up (light: the per-request path asks, OpenTelemetry stays unloaded)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.telemetry.setup import Telemetry

__all__ = ["current", "install", "uninstall"]

_current: Telemetry | None = None


def current() -> Telemetry | None:
    """The telemetry set up for this process, if any."""
    return _current


def install(telemetry: Telemetry | None) -> None:
    """Make `telemetry` the process's (tests: one with in-memory readers and span exporters; None: none)."""
    global _current
    _current = telemetry


def uninstall() -> None:
    """Shut the process's telemetry down and forget it."""
    global _current
    if _current is not None:
        _current.shutdown()
    _current = None
