"""What the queue path receives and sends, free of any transport type.

The Functions adapter turns a `func.ServiceBusMessage` into an `Incoming`; replay
builds one from a line of a file. An `Outbound` is everything Service Bus needs to
send one message, including what the Functions output binding cannot set from Python
(MessageId, CorrelationId, application properties).

A message may carry several events as an envelope, the body of `POST /api/score/batch`:
`{"events": [<event>, ...]}` (docs/queue.md). `unpack` turns it into one `Incoming` per
event, `message_id` `<message id>#<index>`, so each event gets its own verdict.

A rejection is sent under `rejection_id`: a digest of what was rejected (the message's id and
body; for an envelope's event, the envelope's) with the event's index. Service Bus drops a
message whose MessageId it saw within the duplicate-detection window, so an id made from the
producer's message id alone (`#0`, `#1`, ... for envelopes sent without one) would keep one
rejection of many; a redelivery of the same message still maps to the same id, and is dropped.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from msgspec import UNSET, UnsetType

from shared.domain.answers import Rejection, encode
from shared.domain.events import decode_batch
from shared.domain.records import hashed_id
from shared.errors import InvalidEvent, PayloadTooLarge, ScoringError, TooManyItems

__all__ = [
    "REJECTED_QUEUE",
    "TRACE_PROPERTIES",
    "Incoming",
    "Outbound",
    "rejection_id",
    "rejection_record",
    "trace_properties",
    "unpack",
]

# Where a rejection is sent, from the payments and the outcomes alike (rejection_record, rejection_id).
REJECTED_QUEUE = "risk-rejected"
# W3C trace context as application properties; the SDK's own tracing writes `Diagnostic-Id`.
TRACE_PROPERTIES = ("traceparent", "tracestate", "Diagnostic-Id")
# A record keeps a body up to this size whole; past it (far beyond any valid event) an excerpt,
# the size and a SHA-256 identify it, so the record stays within the output queue's message size.
WHOLE_BODY_BYTES = 64 * 1024
EXCERPT_BYTES = 1024
# Service Bus refuses a longer MessageId (azure-servicebus==7.15.0 `_common/constants.py`,
# MESSAGE_PROPERTY_MAX_LENGTH; `ServiceBusMessage.message_id` raises ValueError past it).
MESSAGE_ID_CHARS = 128


@dataclass(frozen=True, slots=True)
class Incoming:
    """One received message: what the handler needs of it, nothing of its transport."""

    message_id: str
    body: bytes
    delivery_count: int = 1
    enqueued_time: datetime | None = None
    correlation_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)  # the trace context only
    envelope: bytes | None = None  # an envelope's event: the whole envelope it came in
    index: int = 0  # its place there


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


# NOTE: the first key decides, so a plain event costs one anchored match (about 0.1 µs), never a second parse
_ENVELOPE = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"events"[ \t\n\r]*:')


def unpack(msg: Incoming, max_bytes: int, max_events: int) -> list[Incoming]:
    """The events of an envelope (a body whose first key is "events"), one `Incoming` each with
    `message_id` `<message id>#<index>` and the message's other facts; any other message, alone.

    The envelope is the message's own fault, rejected whole, when it is over `max_bytes`
    (`PayloadTooLarge`), unreadable (`MalformedJson`), holds no list of events or an item that
    is not an object (`InvalidEvent`), or more than `max_events` (`TooManyItems`). An item is
    never unpacked again: an envelope inside one is an invalid event of its own.
    """
    if not _ENVELOPE.match(msg.body):
        return [msg]
    if len(msg.body) > max_bytes:
        raise PayloadTooLarge(f"envelope of {len(msg.body)} bytes exceeds MAX_MESSAGE_BYTES ({max_bytes})")
    items = decode_batch(msg.body, len(msg.body))  # the count is checked below, worded for the queue
    if len(items) > max_events:
        raise TooManyItems(f"an envelope holds at most {max_events} events (MAX_BATCH_ITEMS), got {len(items)}")
    events: list[Incoming] = []
    for index, raw in enumerate(items):
        body = bytes(raw)
        if body[:1] != b"{":
            raise InvalidEvent(f"an envelope's events are objects; item {index} is not")
        mid = event_message_id(msg.message_id, index)
        events.append(
            Incoming(
                mid, body, msg.delivery_count, msg.enqueued_time, msg.correlation_id, msg.properties, msg.body, index
            )
        )
    return events


def rejection_id(msg: Incoming) -> str:
    """The MessageId of `msg`'s rejection, from what was rejected: `rejected:` and a digest of the
    message's id and body (an envelope's event: its envelope's), `#<index>` for an envelope's event.
    Two sends differ in it even without a MessageId; a redelivery of one send keeps it."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(msg.message_id.encode())
    digest.update(b"\0")
    digest.update(msg.body if msg.envelope is None else msg.envelope)
    suffix = "" if msg.envelope is None else f"#{msg.index}"
    return f"rejected:{digest.hexdigest()}{suffix}"


def event_message_id(message_id: str, index: int) -> str:
    """`<message id>#<index>`, within MESSAGE_ID_CHARS: a longer one keeps the id's head and
    names the whole id by a digest, so a rejection's MessageId is still one Service Bus accepts
    and still tells two envelopes apart."""
    suffix = f"#{index}"
    if len(message_id) + len(suffix) <= MESSAGE_ID_CHARS:
        return message_id + suffix
    digest = hashlib.blake2b(message_id.encode(), digest_size=16).hexdigest()
    return f"{message_id[: MESSAGE_ID_CHARS - len(suffix) - len(digest) - 1]}~{digest}{suffix}"


# for a body that is not a JSON object (cut short, broken): the fields found by their text
_USER_TEXT = re.compile(rb'("user_id"\s*:\s*)"((?:[^"\\]|\\.){0,512})"?')
_NOTE_TEXT = re.compile(rb'("note"\s*:\s*)("(?:[^"\\]|\\.)*"?|[^,}]*)')


def redacted(body: bytes, key: bytes = b"") -> bytes:
    """`body` with every `note` dropped and every `user_id` hashed (`h:` and 32 hex digits), at
    any depth: an envelope's events, or a list of events sent by mistake, are redacted too."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict | list):
        _scrub(doc, key)
        return orjson.dumps(doc)
    if doc is not None:
        return body  # a JSON string, number or literal: no field of a payment to name
    body = _NOTE_TEXT.sub(rb"\1null", body)
    return _USER_TEXT.sub(
        lambda m: m[1] + b'"h:' + hashed_id(m[2].decode("utf-8", "replace"), key).encode() + b'"', body
    )


def _scrub(doc: dict[str, Any] | list[Any], key: bytes) -> None:
    """Every object in `doc` without its note, its user id hashed; a stack, as nesting may go deep."""
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            node.pop("note", None)
            if isinstance(node.get("user_id"), str):
                node["user_id"] = "h:" + hashed_id(node["user_id"], key)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


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
