"""Hypothesis strategies shared by the property tests: JSON values, valid events, corrupt bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from shared.domain.events import PaymentEvent

# Text without control characters (C0, DEL, C1 are Unicode's Cc) or lone surrogates.
PRINTABLE = st.characters(blacklist_categories=("Cc", "Cs"))

# Integers well past 64 bits (JSON has no limit) but short of Python's 4,300-digit str() limit.
HUGE = 10**400
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-HUGE, HUGE)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=25,
)


@st.composite
def json_bytes(draw: st.DrawFn, values: st.SearchStrategy[Any] = json_values) -> bytes:
    """A value written as JSON: NaN and Infinity as Python writes them, escaped or raw non-ASCII."""
    return json.dumps(draw(values), ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


# Offsets as RFC 3339 writes them: whole minutes within ±23:59.
offsets = st.one_of(
    st.just(UTC),
    st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda minutes: timezone(timedelta(minutes=minutes))),
)


def representable(ts: datetime) -> bool:
    """Whether the instant `ts` names exists in UTC (0001-01-01T00:00+05:00 does not)."""
    try:
        ts.astimezone(UTC)
    except OverflowError:
        return False
    return True


ids = st.text(PRINTABLE, min_size=1, max_size=128)
# NOTE: the first and last days of the calendar, where an offset can push the instant out of it.
any_timestamps = st.one_of(
    st.datetimes(timezones=offsets),
    st.datetimes(max_value=datetime(1, 1, 2), timezones=offsets),
    st.datetimes(min_value=datetime(9999, 12, 31), timezones=offsets),
)
timestamps = any_timestamps.filter(representable)


@st.composite
def events(draw: st.DrawFn, when: st.SearchStrategy[datetime] = timestamps) -> PaymentEvent:
    """Any event the schema admits."""
    return PaymentEvent(
        event_id=draw(ids),
        user_id=draw(ids),
        amount=draw(st.floats(0, 1e12)),
        currency=draw(st.from_regex(r"\A[A-Z]{3}\Z")),
        merchant_id=draw(ids),
        merchant_category=draw(st.from_regex(r"\A[0-9]{4}\Z")),
        country=draw(st.from_regex(r"\A[A-Z]{2}\Z")),
        channel=draw(st.sampled_from(["web", "app", "pos"])),
        timestamp=draw(when),
        note=draw(st.none() | st.text(PRINTABLE, max_size=1000)),
    )


def event_dict(event: PaymentEvent) -> dict[str, Any]:
    """The JSON object of an event, as a client would write it."""
    body = {f: getattr(event, f) for f in event.__struct_fields__}
    body["timestamp"] = event.timestamp.isoformat()
    return body


@st.composite
def corrupted(draw: st.DrawFn, valid: bytes) -> bytes:
    """`valid` truncated, with bytes flipped, inserted or deleted."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif data:
            del data[at]
    return bytes(data)
