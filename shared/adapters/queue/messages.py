"""What the queue path receives and sends, free of any transport type.

The Functions adapter turns a `func.ServiceBusMessage` into an `Incoming`; replay
builds one from a line of a file. An `Outbound` is everything Service Bus needs to
send one message, including what the Functions output binding cannot set from Python
(MessageId, CorrelationId, application properties).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from msgspec import UNSET, UnsetType

from shared.domain.answers import Rejection, encode
from shared.errors import ScoringError

__all__ = ["TRACE_PROPERTIES", "Incoming", "Outbound", "rejection_record", "trace_properties"]

# W3C trace context as application properties; the SDK's own tracing writes `Diagnostic-Id`.
TRACE_PROPERTIES = ("traceparent", "tracestate", "Diagnostic-Id")
# A record keeps a body up to this size whole; past it (far beyond any valid event) an excerpt,
# the size and a SHA-256 identify it, so the record stays within the output queue's message size.
WHOLE_BODY_BYTES = 64 * 1024
EXCERPT_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Incoming:
    """One received message: what the handler needs of it, nothing of its transport."""

    message_id: str
    body: bytes
    delivery_count: int = 1
    enqueued_time: datetime | None = None
    correlation_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)  # the trace context only


@dataclass(frozen=True, slots=True)
class Outbound:
    """One message to send: `message_id` is what Service Bus duplicate detection keys on."""

    queue: str
    body: bytes
    message_id: str
    correlation_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)


def trace_properties(properties: Mapping[str, object] | None) -> dict[str, str]:
    """The trace context among a message's application properties (keys as str, values as str)."""
    found: dict[str, str] = {}
    for key, value in (properties or {}).items():
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name in TRACE_PROPERTIES and value is not None:
            found[name] = value.decode() if isinstance(value, bytes) else str(value)
    if "traceparent" not in found and "Diagnostic-Id" in found:  # NOTE: the SDK writes W3C there
        found["traceparent"] = found["Diagnostic-Id"]
    return found


def enqueued_iso(msg: Incoming) -> str | None:
    if msg.enqueued_time is None:
        return None
    when = msg.enqueued_time if msg.enqueued_time.tzinfo else msg.enqueued_time.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def rejection_record(msg: Incoming, exc: ScoringError) -> bytes:
    """The rejected-queue record: why, which message, and its body (or an excerpt when huge)."""
    body, whole = msg.body, len(msg.body) <= WHOLE_BODY_BYTES
    excerpt = body if whole else body[:EXCERPT_BYTES]
    text: str | UnsetType = UNSET
    b64: str | UnsetType = UNSET
    try:
        text = excerpt.decode("utf-8")
    except UnicodeDecodeError:
        b64 = base64.b64encode(excerpt).decode()
    return encode(
        Rejection(
            exc.code,
            exc.detail,
            msg.message_id,
            msg.delivery_count,
            len(body),
            body_sha256=UNSET if whole else hashlib.sha256(body).hexdigest(),
            truncated=UNSET if whole else True,
            body=text,
            body_base64=b64,
        )
    )
