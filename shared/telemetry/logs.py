"""Structured logs: JSON lines, and one line per rejected input, rate-limited under a flood.

Log calls pass their fields as `extra={...}`; `JsonFormatter` writes them as one JSON
object per line (`make run`), and the Azure Monitor log exporter turns the same fields
into customDimensions. Never a user id, a note, a body or a secret: a rejection carries
its error code and the validator's detail (which names fields, never their values).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["JsonFormatter", "RejectionLog", "rejections"]

_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
DETAIL_CHARS = 200


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        body.update((k, v) for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_"))
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class RejectionLog:
    """One warning per rejected input with its reason, at most `per_second` lines a second.

    Past the rate, lines are counted instead of written; the next line written says how many
    were suppressed since the previous one (`suppressed`), so nothing is silently lost.
    """

    def __init__(self, per_second: float = 10.0, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger("shared.rejections")
        self.configure(per_second)

    def configure(self, per_second: float) -> None:
        self.rate = max(per_second, 0.0)
        self._tokens = self.rate
        self._at = time.monotonic()
        self.suppressed = 0

    def rejected(self, where: str, code: str, detail: str, **fields: object) -> bool:
        """Log one rejection (where: `http` or `queue`); False when the rate suppressed it."""
        now = time.monotonic()
        self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            self.suppressed += 1
            return False
        self._tokens -= 1.0
        extra: dict[str, object] = {"event": "input_rejected", "where": where, "reason": code, **fields}
        extra["detail"] = detail[:DETAIL_CHARS]
        if self.suppressed:
            extra["suppressed"], self.suppressed = self.suppressed, 0
        self.log.warning("input rejected (%s): %s", code, extra["detail"], extra=extra)
        return True


rejections = RejectionLog()
"""The process's rejection log (its rate set from LOG_REJECTIONS_PER_S at set-up)."""
