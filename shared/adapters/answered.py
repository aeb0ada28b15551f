"""The one logging policy for an error answered to a caller, on every surface (`http`, `v2`, `grpc`, `queue`).

An `Overloaded` is not logged at all (a line per refusal would cost what shedding saves:
`scoring.requests.shed` counts them), a 5xx is a warning line, a 4xx (the caller's own) goes to the
rate-limited rejection log (shared/telemetry/logs.py) with its code. Only adapters answer callers, so
only they log this way; the error tree (shared/errors.py) knows nothing of logs.
"""

from __future__ import annotations

import logging

from shared.errors import Overloaded, ScoringError
from shared.telemetry.logs import rejections

__all__ = ["log_answered"]

log = logging.getLogger("shared.errors")  # NOTE: the logger's name is what operators' queries filter on


def log_answered(exc: ScoringError, surface: str, **where: object) -> None:
    """Log `exc` as answered on `surface`; `where` says where (route, method, message_id) without the caller's data."""
    if isinstance(exc, Overloaded):
        return
    if exc.status >= 500:
        place = " ".join(f"{k}={v}" for k, v in where.items())
        log.warning("%s %s -> %s %s: %s", surface, place, exc.status, exc.code, exc.detail)
    else:
        rejections.rejected(surface, exc.code, exc.detail, status=exc.status, **where)
