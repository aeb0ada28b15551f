"""Properties of the event decoder: any input is an event or a 4xx `BadRequest`, nothing else.

The decoder is the first thing a request body meets on `POST /api/score`, the batch route
and the queue path; whatever a client or a producer sends, it must answer with the
service's own error (a clear 4xx), never a crash that turns into a 500.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from shared.domain.events import (
    TEXT_FIELDS,
    PaymentEvent,
    decode_activation,
    decode_batch,
    decode_event,
    decode_events,
    event_digest,
)
from shared.errors import BadRequest, EventIdConflict, InvalidEvent, MalformedJson, ScoringError
from tests.conftest import event as event_body
from tests.strategies import (
    HUGE,
    any_timestamps,
    corrupted,
    event_dict,
    events,
    json_bytes,
    json_values,
    representable,
)

VALID = json.dumps(event_body()).encode()
CONTROL = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))}


def decoded_or_refused(body: bytes) -> PaymentEvent | BadRequest:
    """The event, or the error it was refused with; any other exception fails the test."""
    try:
        return decode_event(body)
    except BadRequest as exc:
        assert 400 <= exc.status < 500 and exc.detail, exc
        return exc


def assert_admissible(event: PaymentEvent) -> None:
    """What every accepted event satisfies, as the schema documents it."""
    assert 0 <= event.amount <= 1e12
    assert event.currency.isascii() and event.currency.isupper() and len(event.currency) == 3
    assert event.country.isascii() and event.country.isupper() and len(event.country) == 2
    assert event.channel in ("web", "app", "pos")
    assert event.timestamp.tzinfo is not None and representable(event.timestamp)
    for field in ("event_id", "user_id", "merchant_id"):
        assert 1 <= len(getattr(event, field)) <= 128
    assert len(event.merchant_category) == 4 and event.merchant_category.isdigit() and len(event.note or "") <= 1000
    for field in TEXT_FIELDS:
        assert not CONTROL & set(getattr(event, field) or ""), field


@given(json_bytes())
@example(b"\xef\xbb\xbf" + VALID)  # a UTF-8 byte order mark
@example(b'{"amount": NaN}')
@example(b"[" * 100_000)
def test_any_json_value_is_an_event_or_a_4xx(body: bytes) -> None:
    result = decoded_or_refused(body)
    if isinstance(result, PaymentEvent):
        assert_admissible(result)


@given(st.binary(max_size=2000))
@example(b"")
@example(b"\xff\xfe")
@example(VALID.replace(b"evt-1", b"evt-\xff"))  # not UTF-8
def test_any_bytes_are_an_event_or_a_4xx(body: bytes) -> None:
    decoded_or_refused(body)


@given(st.data())
def test_a_corrupted_valid_body_is_an_event_or_a_4xx(data: st.DataObject) -> None:
    valid = msgspec.json.encode(data.draw(events()))
    result = decoded_or_refused(data.draw(corrupted(valid)))
    if isinstance(result, PaymentEvent):
        assert_admissible(result)


@given(st.sampled_from(list(event_body())), json_values)
@example("amount", 10**400)
@example("amount", float("nan"))
@example("amount", -0.0)
@example("timestamp", "0001-01-01T00:00:00+00:01")
@example("timestamp", "9999-12-31T23:59:59-00:01")
def test_any_value_in_any_field_is_an_event_or_a_4xx(field: str, value: Any) -> None:
    body = json.dumps(event_body(**{field: value})).encode()
    result = decoded_or_refused(body)
    if isinstance(result, PaymentEvent):
        assert_admissible(result)


@given(events(), st.booleans())
def test_every_valid_event_round_trips(event: PaymentEvent, as_client: bool) -> None:
    """What msgspec writes, and what a client writes (`json.dumps`, escaped or not), decode to the same event."""
    body = json.dumps(event_dict(event), ensure_ascii=as_client).encode() if as_client else msgspec.json.encode(event)
    again = decode_event(body)
    assert again == event
    assert again.timestamp.utcoffset() == event.timestamp.utcoffset()
    assert msgspec.json.encode(again) == msgspec.json.encode(event)


@given(events(when=any_timestamps))
@example(PaymentEvent(**{**event_body(), "timestamp": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))}))
@example(
    PaymentEvent(**{**event_body(), "timestamp": datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5)))})
)
def test_an_instant_outside_utc_is_refused_not_a_crash_later(event: PaymentEvent) -> None:
    """Regression: 0001-01-01T00:00+05:00 was accepted, then `astimezone(UTC)` (the feature
    mapping's hour and weekday, the review prompt) raised OverflowError: a 500."""
    result = decoded_or_refused(msgspec.json.encode(event))
    if representable(event.timestamp):
        assert result == event
    else:
        assert isinstance(result, InvalidEvent) and "timestamp" in result.detail


# -- the documented limits ------------------------------------------------------------


@given(st.sampled_from(["event_id", "user_id", "merchant_id"]), st.integers(129, 2000))
def test_ids_over_128_characters_are_refused(field: str, length: int) -> None:
    with pytest.raises(InvalidEvent, match=field):
        decode_event(json.dumps(event_body(**{field: "x" * length})).encode())


@given(st.one_of(st.floats(max_value=-1e-300), st.floats(min_value=1e12, exclude_min=True), st.integers(-HUGE, -1)))
def test_amounts_outside_0_to_1e12_are_refused(amount: float) -> None:
    assume(amount == amount and abs(amount) != float("inf"))
    with pytest.raises(InvalidEvent, match="amount"):
        decode_event(json.dumps(event_body(amount=amount)).encode())


@given(st.integers(2**63, HUGE) | st.integers(-HUGE, -(2**63)))
def test_integers_past_64_bits_are_an_invalid_amount(amount: int) -> None:
    with pytest.raises(InvalidEvent, match="amount"):
        decode_event(json.dumps(event_body(amount=amount)).encode())


@given(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"nan", b"inf"]))
def test_nan_and_infinity_are_refused(token: bytes) -> None:
    """NaN and Infinity are not JSON (malformed); 1e400 is JSON, out of range (invalid)."""
    with pytest.raises(MalformedJson if token.isalpha() or token.startswith(b"-I") else InvalidEvent):
        decode_event(VALID.replace(b"120.5", token))


@given(st.integers(1, 5000), st.sampled_from(["[", '{"a":']))
def test_nesting_at_any_depth_is_a_4xx_not_a_recursion_error(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    nested = (opener * depth + "1" + closer * depth).encode()
    decoded_or_refused(nested)
    result = decoded_or_refused(VALID[:-1] + b', "extra": ' + nested + b"}")  # unknown fields are skipped
    assert isinstance(result, PaymentEvent | MalformedJson)


@given(st.binary(min_size=1, max_size=8).filter(lambda b: not _utf8(b)))
def test_bytes_that_are_not_utf8_are_malformed_json(junk: bytes) -> None:
    with pytest.raises(MalformedJson):
        decode_event(VALID.replace(b"gift card", junk))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def with_duplicate(field: str, first: Any) -> bytes:
    """VALID with `field` written twice: `first`, then VALID's own value."""
    return b'{"' + field.encode() + b'": ' + json.dumps(first).encode() + b", " + VALID[1:]


@given(st.sampled_from(list(event_body())), json_values)
def test_a_duplicated_key_is_checked_each_time(field: str, first: Any) -> None:
    """As msgspec reads them: every value of a duplicated key is validated, the last one is kept."""
    result = decoded_or_refused(with_duplicate(field, first))
    if isinstance(result, PaymentEvent):
        assert result == decode_event(VALID)


@given(st.sampled_from(list(event_body())), events())
def test_of_two_valid_values_of_a_key_the_last_wins(field: str, other: PaymentEvent) -> None:
    assert decode_event(with_duplicate(field, event_dict(other)[field])) == decode_event(VALID)


def test_a_byte_order_mark_is_malformed_json() -> None:
    """RFC 8259 lets a parser refuse a BOM; msgspec does, with a 400 that says where."""
    with pytest.raises(MalformedJson, match="byte 0"):
        decode_event(b"\xef\xbb\xbf" + VALID)


# -- batches and the small bodies -------------------------------------------------------


@given(json_values | st.lists(json_values, max_size=20).map(lambda items: {"events": items}), st.integers(1, 8))
@example({"events": [event_body(), {"bad": 1}, "x", None]}, 8)
def test_any_batch_is_items_or_a_4xx(value: Any, max_items: int) -> None:
    body = json.dumps(value).encode()
    try:
        items = decode_events(body, max_items)
    except BadRequest as exc:
        assert 400 <= exc.status < 500
        return
    assert 1 <= len(items) <= max_items and len(items) == len(value["events"])
    for item in items:
        if isinstance(item, ScoringError):
            assert isinstance(item, BadRequest) and 400 <= item.status < 500
        else:
            assert_admissible(item)


def each_on_its_own(body: bytes, max_items: int) -> list[Any]:
    """The reference: every item decoded alone, as `decode_event` decodes one body; then an id binds
    the content of the first valid item carrying it (a later one with other content: a conflict)."""
    items: list[Any] = []
    for raw in decode_batch(body, max_items):
        try:
            items.append(decode_event(bytes(raw)))
        except ScoringError as exc:
            items.append(exc)
    first: dict[str, tuple[int, PaymentEvent]] = {}
    for k, item in enumerate(items):
        if isinstance(item, PaymentEvent):
            at, earlier = first.setdefault(item.event_id, (k, item))
            if earlier != item:
                items[k] = EventIdConflict(f"event_id already names item {at} of this batch, with other content")
    return items


def outcome(decode: Any, body: bytes, max_items: int) -> Any:
    try:
        items = decode(body, max_items)
    except BadRequest as exc:
        return (type(exc), exc.detail)
    return [(type(i), i.detail) if isinstance(i, ScoringError) else i for i in items]


valid_event_dicts = events().map(event_dict)
batch_items = st.lists(
    valid_event_dicts | json_values | valid_event_dicts.map(lambda d: {**d, "amount": -1}), max_size=9
)


@given(
    batch_items.map(lambda items: json.dumps({"events": items}).encode())
    | st.lists(valid_event_dicts, min_size=1, max_size=9).map(lambda items: json.dumps({"events": items}).encode())
    | st.lists(events(), min_size=1, max_size=9).map(
        lambda items: (
            b'{"events":[' + b",".join(json.dumps(event_dict(e), ensure_ascii=False).encode() for e in items) + b"]}"
        )
    )
    | json_bytes(),
    st.integers(1, 8),
)
@example(b'{"events": [' + VALID + b', {"bad": 1}]}', 8)
@example(b'{"events": [' + VALID + b"," + VALID.replace(b'"m-42"', b'"m-4\\u00072"') + b"]}", 8)
def test_a_batch_decoded_in_one_call_equals_each_item_decoded_alone(body: bytes, max_items: int) -> None:
    assert outcome(decode_events, body, max_items) == outcome(each_on_its_own, body, max_items)


@given(st.binary(max_size=500) | json_bytes())
def test_any_batch_bytes_are_items_or_a_4xx(body: bytes) -> None:
    try:
        decode_batch(body, 256)
    except BadRequest as exc:
        assert 400 <= exc.status < 500


@given(st.binary(max_size=200) | json_bytes() | json_values.map(lambda v: json.dumps({"version": v}).encode()))
def test_any_activation_is_a_version_or_a_4xx(body: bytes) -> None:
    try:
        version = decode_activation(body).version
    except BadRequest as exc:
        assert 400 <= exc.status < 500
        return
    assert version.isascii() and version.isdigit() and version[0] != "0" and len(version) <= 9


def test_utc_is_what_z_decodes_to() -> None:
    """The hot path skips the instant check for "Z" (and +00:00): they decode to `UTC` itself."""
    assert decode_event(VALID).timestamp.tzinfo is UTC


# -- one payment, one digest: the queue's idempotency and the batch's id check agree ---------------


def _amounts(amount: float) -> list[str]:
    """Ways a producer can write `amount` in JSON without changing it."""
    written = repr(amount)
    forms = [written, written + "e0" if "e" not in written else written.replace("e", "E")]
    if amount.is_integer() and amount < 2**53:
        forms.append(str(int(amount)))
    if amount == 0:
        forms += ["-0.0", "-0", "0e5", "-0E-3"]
    return forms


@st.composite
def restated(draw: st.DrawFn, event: PaymentEvent) -> bytes:
    """`event` as some producer writes the same payment: keys in any order, an unknown field, the
    amount in another form (-0.0 for a zero), the timestamp at another offset or precision (Z,
    +00:00, -00:00), text escaped or not, an absent note as null or missing."""
    fields = {f: getattr(event, f) for f in event.__struct_fields__ if f not in ("amount", "timestamp")}
    if fields["note"] is None and draw(st.booleans()):
        del fields["note"]
    ascii_only = draw(st.booleans())
    parts = [f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=ascii_only)}" for k, v in fields.items()]
    parts.append(f'"amount":{draw(st.sampled_from(_amounts(event.amount)))}')
    offset = draw(st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]))
    ts = event.timestamp
    if offset is not None:
        with contextlib.suppress(OverflowError):  # NOTE: off the calendar there: the instant as first written
            ts = ts.astimezone(offset)
    written = ts.isoformat(timespec=draw(st.sampled_from(["auto", "microseconds"])))
    if written.endswith("+00:00"):
        written = written[:-6] + draw(st.sampled_from(["Z", "+00:00", "-00:00"]))
    parts.append(f'"timestamp":{json.dumps(written)}')
    parts.append(f'"x_producer":{json.dumps(draw(st.none() | st.integers() | st.text(max_size=8)))}')
    order = draw(st.permutations(parts))
    return ("{" + ",".join(order) + "}").encode()


zero_heavy_events = (
    events()
    | events().map(lambda e: msgspec.structs.replace(e, amount=0.0))
    | events().map(lambda e: msgspec.structs.replace(e, amount=-0.0))
)


def both_paths_call_it_the_same(first: bytes, second: bytes) -> bool:
    """Whether the queue path (the digest its idempotency record keeps) and the batch path (the id
    check of `{"events": [first, second]}`) both take `second` for the payment `first` is."""
    same_digest = event_digest(decode_event(first)) == event_digest(decode_event(second))
    items = decode_events(b'{"events":[' + first + b"," + second + b"]}", 8)
    no_conflict = not isinstance(items[1], EventIdConflict)
    assert same_digest == no_conflict, (same_digest, no_conflict)
    return same_digest


def test_minus_zero_is_the_same_payment_as_zero_on_both_paths() -> None:
    zero = json.dumps(event_body(amount=0.0)).encode()
    assert both_paths_call_it_the_same(zero, zero.replace(b'"amount": 0.0', b'"amount": -0.0'))


@given(zero_heavy_events, st.data())
def test_one_payment_however_a_producer_writes_it_is_one_payment_on_both_paths(
    event: PaymentEvent, data: st.DataObject
) -> None:
    first, second = data.draw(restated(event)), data.draw(restated(event))
    assert both_paths_call_it_the_same(first, second)
    assert decode_event(first) == decode_event(second)  # and struct equality agrees


@given(zero_heavy_events, st.data())
def test_a_changed_field_is_another_payment_on_both_paths(event: PaymentEvent, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(["amount", "note", "timestamp", "merchant_id", "channel"]))
    if field == "amount":
        value: Any = data.draw(st.floats(0, 1e12).filter(lambda a: a != event.amount))
    elif field == "note":
        value = None if event.note else "n"
    elif field == "timestamp":
        value = event.timestamp + timedelta(microseconds=1) if event.timestamp.year < 9999 else None
        assume(value is not None and representable(value))
    elif field == "merchant_id":
        value = event.merchant_id[:127] + ("a" if not event.merchant_id.endswith("a") else "b")
    else:
        value = {"web": "app", "app": "pos", "pos": "web"}[event.channel]
    other = msgspec.structs.replace(event, **{field: value})
    assert not both_paths_call_it_the_same(data.draw(restated(event)), data.draw(restated(other)))
