"""What the queue path receives and sends, free of any transport type.

The Functions adapter turns a `func.ServiceBusMessage` into an `Incoming`; replay
builds one from a line of a file. An `Outbound` is everything Service Bus needs to
send one message, including what the Functions output binding cannot set from Python
(MessageId, CorrelationId, application properties).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson
from msgspec import UNSET, UnsetType

from shared.domain.answers import Rejection, encode
from shared.domain.records import hashed_id
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
    if "traceparent" not in found and "Diagnostic-Id" in found:  # the SDK writes W3C there
        found["traceparent"] = found["Diagnostic-Id"]
    return found


# for a body that is not a JSON object (cut short, broken): the fields found by their text
_USER_TEXT = re.compile(rb'("user_id"\s*:\s*)"((?:[^"\\]|\\.){0,512})"?')
_NOTE_TEXT = re.compile(rb'("note"\s*:\s*)("(?:[^"\\]|\\.)*"?|[^,}]*)')


def redacted(body: bytes, key: bytes = b"") -> bytes:
    """`body` with its `note` dropped and its `user_id` hashed (`h:` and 32 hex digits)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        doc.pop("note", None)
        if isinstance(doc.get("user_id"), str):
            doc["user_id"] = "h:" + hashed_id(doc["user_id"], key)
        return orjson.dumps(doc)
    if doc is not None:
        return body  # JSON, but no object: no field of a payment to name
    body = _NOTE_TEXT.sub(rb"\1null", body)
    return _USER_TEXT.sub(
        lambda m: m[1] + b'"h:' + hashed_id(m[2].decode("utf-8", "replace"), key).encode() + b'"', body
    )


def enqueued_iso(msg: Incoming) -> str | None:
    if msg.enqueued_time is None:
        return None
    when = msg.enqueued_time if msg.enqueued_time.tzinfo else msg.enqueued_time.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def rejection_record(msg: Incoming, exc: ScoringError, key: bytes = b"") -> bytes:
    """The rejected-queue record: why, which message, and its body (or an excerpt when huge),
    redacted: the note dropped, the user id hashed as the prediction log hashes ids (keyed by
    PREDICTION_LOG_HASH_KEY), so the record names the payment without naming its payer."""
    body, whole = msg.body, len(msg.body) <= WHOLE_BODY_BYTES
    excerpt = redacted(body if whole else body[:EXCERPT_BYTES], key)
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
