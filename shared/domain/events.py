"""The payment event: its schema, and decoding bytes into it with clear errors.

msgspec validates while it decodes (one pass, no intermediate dict); unknown
fields are ignored. Errors are translated into the service's error tree: whatever the
bytes, the answer is an event, `MalformedJson` (400) or `InvalidEvent` (422), never
another exception (tests/domain/test_events_properties.py holds the properties).

Limits, as decoded:
  - not JSON: a UTF-8 byte order mark, invalid UTF-8, NaN/Infinity tokens, a lone
    surrogate escape, nesting past Python's recursion limit (about 1,000 levels, even
    in an unknown field) are `MalformedJson`;
  - numbers: `amount` within [0, 1e12] (-0.0 is 0, and the same payment as 0); 1e400 or an integer past 64 bits
    is out of range: `InvalidEvent`;
  - a duplicated key: every value is checked, the last one is kept;
  - text: ids 1..128 characters, note up to 1000, none with a control character;
    merchant_category an ISO 18245 merchant category code (exactly four digits: the one
    free-text field besides the note would otherwise reach the review's prompt);
    currency and country exactly [A-Z]{3} and [A-Z]{2};
  - timestamp: RFC 3339 with an offset, naming an instant that exists in UTC
    (0001-01-01T00:00+05:00 does not: it is `InvalidEvent`).
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Literal, TypeVar

import msgspec

from shared.errors import EventIdConflict, InvalidEvent, MalformedJson, ScoringError, TooManyItems

__all__ = [
    "EXAMPLE_EVENT",
    "Activation",
    "CanarySplit",
    "PaymentEvent",
    "decode_activation",
    "decode_batch",
    "decode_canary",
    "decode_event",
    "decode_event_raw",
    "decode_events",
    "decoded",
    "event_digest",
]

# NOTE: patterns are searched (`re.search`), and `$` also matches before a final newline:
# every pattern is anchored with \A ... \Z. No text field admits a control character (C0,
# DEL, C1), so "NG\n" is not "NG" and a log line cannot be forged through a field. JSON
# carries C0 only as escapes, and DEL and C1 as themselves: an ASCII body with no backslash
# and no DEL cannot hold one, so only the bodies that might are searched field by field.
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
TEXT_FIELDS = ("event_id", "user_id", "merchant_id", "merchant_category", "note")


EXAMPLE_EVENT: dict[str, object] = {
    "event_id": "evt-1001",
    "user_id": "u00042",
    "amount": 912.40,
    "currency": "USD",
    "merchant_id": "m-77",
    "merchant_category": "7995",
    "country": "NG",
    "channel": "web",
    "timestamp": "2026-11-29T03:12:00Z",
    "note": "gift cards",
}
"""The documented example (the README's quick start, the OpenAPI examples, scripts/latency_loop.py)."""


class PaymentEvent(msgspec.Struct, frozen=True):
    """One payment to score."""

    event_id: Id
    user_id: Id
    amount: Annotated[float, msgspec.Meta(ge=0, le=1e12)]
    currency: Annotated[str, msgspec.Meta(pattern=r"\A[A-Z]{3}\Z")]
    merchant_id: Id
    merchant_category: Annotated[str, msgspec.Meta(pattern=r"\A[0-9]{4}\Z", description="ISO 18245 MCC")]
    country: Annotated[str, msgspec.Meta(pattern=r"\A[A-Z]{2}\Z")]
    channel: Literal["web", "app", "pos"]
    timestamp: Annotated[datetime, msgspec.Meta(tz=True)]
    note: Annotated[str, msgspec.Meta(max_length=1000)] | None = None


_canonical = msgspec.json.Encoder()


def event_digest(event: PaymentEvent) -> bytes:
    """16 bytes naming the payment's content: the decoded event re-encoded (fields in schema order,
    unknown fields gone, the timestamp and amount in one form), so two bodies that say the same
    payment share it and any change of a field changes it. The one definition of "the same
    payment": the queue's idempotency record holds it and a batch's id check compares it
    (tests/domain/test_events_properties.py: however a producer writes one payment, one digest)."""
    ts, amount = event.timestamp, event.amount
    # one instant, one form: +02:00 and Z name the same payment; -0.0 is 0.0 (msgspec writes "-0.0")
    if ts.utcoffset() or (amount == 0.0 and math.copysign(1.0, amount) < 0):
        event = msgspec.structs.replace(event, timestamp=ts.astimezone(UTC), amount=amount + 0.0)
    return hashlib.blake2b(_canonical.encode(event), digest_size=16).digest()


class _Batch(msgspec.Struct):
    events: list[msgspec.Raw]


class _Events(msgspec.Struct):
    events: list[PaymentEvent]


class Activation(msgspec.Struct, frozen=True):
    """`POST /api/models/{name}/activate`: the version to pin (promote), and whether one that could never
    decline (a decline threshold of 1, or above every score of its trial) is meant."""

    version: Annotated[str, msgspec.Meta(pattern=r"\A[1-9][0-9]{0,8}\Z")]
    allow_never_decline: bool = False


class CanarySplit(msgspec.Struct, frozen=True):
    """`PUT /api/models/{name}/canary`: the candidate version and the share of users it scores."""

    version: Annotated[str, msgspec.Meta(pattern=r"\A[1-9][0-9]{0,8}\Z")]
    weight: Annotated[float, msgspec.Meta(ge=0, le=1)]


# msgspec raises UnicodeDecodeError for invalid UTF-8 and RecursionError for absurd nesting.
_UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
_T = TypeVar("_T")


# NOTE: msgspec quotes the value it refused for an enum ("Invalid enum value 'x' - at `$.channel`"):
# details name the field, never the value (it may be a user id or a note put in the wrong field).
_ECHOED = re.compile(r"(Invalid (?:enum )?value) .*?(?= - at `|\Z)", re.S)


def _invalid(exc: msgspec.ValidationError) -> InvalidEvent:
    return InvalidEvent(_ECHOED.sub(r"\1", str(exc)))


def _unreadable(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "body is not valid UTF-8"
    if isinstance(exc, RecursionError):
        return "JSON is nested too deeply"
    return str(exc)


def decoded(decoder: msgspec.json.Decoder[_T], body: bytes) -> _T:
    """`decoder.decode(body)`, msgspec's errors translated: `InvalidEvent` (the field, never the
    value) for a shape refused, `MalformedJson` for bytes that are not JSON."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except _UNREADABLE as exc:
        raise MalformedJson(_unreadable(exc)) from None


_event_decoder = msgspec.json.Decoder(PaymentEvent)
_batch_decoder = msgspec.json.Decoder(_Batch)
_events_decoder = msgspec.json.Decoder(_Events)


def decode_event(body: bytes) -> PaymentEvent:
    """A validated event from a JSON body, or `MalformedJson` / `InvalidEvent`."""
    try:
        event = _event_decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except _UNREADABLE as exc:
        raise MalformedJson(_unreadable(exc)) from None
    if b"\\" in body or b"\x7f" in body or not body.isascii():
        _check_text(event)
    ts = event.timestamp
    if ts.tzinfo is not UTC and ts.year in _EDGE_YEARS:
        _check_instant(ts)
    return event


# Only an offset on the calendar's first or last days can put the instant outside it, and
# `astimezone(UTC)` (the hour feature, the review prompt) would raise OverflowError later. "Z" and
# "+00:00" decode to `UTC` itself: most events cost one identity test.
_EDGE_YEARS = (1, 9999)


def _check_instant(ts: datetime) -> None:
    try:
        ts.astimezone(UTC)
    except OverflowError:
        raise InvalidEvent("Expected a timestamp within years 1..9999 in UTC - at `$.timestamp`") from None


def _check_text(event: PaymentEvent) -> None:
    for field in TEXT_FIELDS:
        value = getattr(event, field)
        if value is not None and _CONTROL.search(value):
            raise InvalidEvent(f"Expected `str` without control characters - at `$.{field}`")


def decode_event_raw(raw: msgspec.Raw) -> PaymentEvent:
    """One item of a batch (already known to be well-formed JSON)."""
    return decode_event(bytes(raw))


def decode_batch(body: bytes, max_items: int) -> list[msgspec.Raw]:
    """The raw items of `{"events": [...]}`; each is validated on its own later."""
    batch = decoded(_batch_decoder, body)
    if not batch.events:
        raise InvalidEvent("events must hold at least one event")
    if len(batch.events) > max_items:
        raise TooManyItems(f"at most {max_items} events per batch, got {len(batch.events)}")
    return batch.events


def decode_events(body: bytes, max_items: int) -> list[PaymentEvent | ScoringError]:
    """Every item of `{"events": [...]}` validated on its own: an event, or its error in its slot.

    The envelope itself (unreadable, empty, too many items) fails the whole batch. An event id
    binds its content: a later item with the id of an earlier one and other content gets
    `EventIdConflict` in its slot (the same payment twice is scored twice, to the same answer).

    A batch of valid events is decoded in one call, its items' text checks and instant
    checks then applied to each (only where the body has escapes or non-ASCII, as for one
    event); any item msgspec refuses sends the whole body down the per-item path, which puts
    each error in its slot. Both give the same items (tests/domain/test_events_properties.py).
    """
    try:
        decoded = _events_decoder.decode(body).events
    except (msgspec.ValidationError, *_UNREADABLE):
        return _decode_each(body, max_items)
    if not decoded or len(decoded) > max_items:
        return _decode_each(body, max_items)  # the envelope's own refusal, worded once
    text_checked = b"\\" in body or b"\x7f" in body or not body.isascii()
    items: list[PaymentEvent | ScoringError] = list(decoded)
    for k, event in enumerate(decoded):
        try:
            if text_checked:
                _check_text(event)
            ts = event.timestamp
            if ts.tzinfo is not UTC and ts.year in _EDGE_YEARS:
                _check_instant(ts)
        except ScoringError as exc:
            items[k] = exc
    return _bound(items)


def _decode_each(body: bytes, max_items: int) -> list[PaymentEvent | ScoringError]:
    items: list[PaymentEvent | ScoringError] = []
    for raw in decode_batch(body, max_items):
        try:
            items.append(decode_event_raw(raw))
        except ScoringError as exc:
            items.append(exc)
    return _bound(items)


def _bound(items: list[PaymentEvent | ScoringError]) -> list[PaymentEvent | ScoringError]:
    """Each id to its first item's content: a later item with other content (another digest, as
    the queue path compares them) is a conflict."""
    first: dict[str, int] = {}  # event id → the index of the first valid item carrying it
    for k, item in enumerate(items):
        if isinstance(item, ScoringError):
            continue
        at = first.setdefault(item.event_id, k)
        earlier = items[at]
        if at != k and isinstance(earlier, PaymentEvent) and event_digest(earlier) != event_digest(item):
            items[k] = EventIdConflict(f"event_id already names item {at} of this batch, with other content")
    return items


_activation_decoder = msgspec.json.Decoder(Activation)


def decode_activation(body: bytes) -> Activation:
    """`{"version": "3"}`, or `MalformedJson` / `InvalidEvent` naming what is wrong."""
    return decoded(_activation_decoder, body)


_canary_decoder = msgspec.json.Decoder(CanarySplit)


def decode_canary(body: bytes) -> CanarySplit:
    """`{"version": "3", "weight": 0.1}`, or `MalformedJson` / `InvalidEvent` naming what is wrong."""
    return decoded(_canary_decoder, body)
