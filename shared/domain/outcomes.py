"""An outcome: what became of a scored payment, learned later (a chargeback, a review, a customer).

    Outcome          what a caller sends (`POST /api/outcomes`, the `risk-outcomes` queue): the raw event id
    OutcomeLine      what the log keeps (beside the decisions): the event id hashed with the log's key
    OutcomeReceipt   the answer to a batch (shared/domain/answers.py): each written, a duplicate, or refused

Decoding refuses, item by item, with the error tree's codes (`InvalidEvent` 422, `EventExpired` 422):
a malformed field (a source that is not one of SOURCES; `other` without a `source_detail`), a
`learned_at` in the future (past FUTURE_SKEW: the clocks of two machines), and one learned more than
RETENTION_DAYS ago (the decision it is about is gone from the log: infra/modules/storage.bicep's
predictionRetentionDays). The envelope's own faults (unreadable, empty, past MAX_BATCH_ITEMS) fail
the batch, as they do for `/api/score/batch`.

The same content restated is a duplicate (`outcome_digest`: the hashed id and every field, the
instant in UTC); another outcome for the same event supersedes the earlier one in the report (the
later `learned_at`, then the later arrival), and both lines are kept.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import msgspec

from shared.domain.events import _CONTROL, Id, decoded
from shared.errors import EventExpired, InvalidEvent, ScoringError, TooManyItems

__all__ = [
    "FUTURE_SKEW",
    "RETENTION_DAYS",
    "SOURCES",
    "Outcome",
    "OutcomeBatch",
    "OutcomeLine",
    "decode_outcome",
    "decode_outcomes",
    "judged",
    "outcome_digest",
    "outcome_items",
    "outcome_line",
]

Source = Literal["chargeback", "review", "customer", "other"]
SOURCES: tuple[str, ...] = ("chargeback", "review", "customer", "other")
FUTURE_SKEW = timedelta(minutes=5)  # a learned_at ahead of our clock by more is refused
RETENTION_DAYS = 180  # infra/modules/storage.bicep, predictionRetentionDays (a test holds the two equal)


class Outcome(msgspec.Struct, frozen=True):
    """What became of one scored payment, learned after its decision."""

    event_id: Id
    outcome: Literal["fraud", "legit"]
    source: Source
    learned_at: Annotated[datetime, msgspec.Meta(tz=True, description="when the outcome was learned (RFC 3339)")]
    amount_lost: Annotated[float, msgspec.Meta(ge=0, le=1e12)] | None = None
    source_detail: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None  # required for `other`


class OutcomeLine(msgspec.Struct, gc=False):
    """An outcome as the log holds it (one JSON object a line, under `outcomes/date=.../hour=...`)."""

    event: str  # the keyed BLAKE2b hash of the event id (shared.domain.records.hashed_id)
    outcome: str
    source: str
    source_detail: str | None
    learned_at: str  # ISO 8601, UTC
    amount_lost: float | None
    received_at: str  # when this replica took it (ISO 8601, microseconds, UTC): the order of arrival
    digest: str  # outcome_digest: the same content restated has the same digest


class OutcomeBatch(msgspec.Struct, frozen=True):
    """`POST /api/outcomes`: up to MAX_BATCH_ITEMS outcomes (each checked on its own)."""

    outcomes: list[Outcome]


class _Batch(msgspec.Struct):
    outcomes: list[msgspec.Raw]


_batch_decoder = msgspec.json.Decoder(_Batch)
_outcome_decoder = msgspec.json.Decoder(Outcome)
_canonical = msgspec.json.Encoder()


def outcome_items(body: bytes, max_items: int) -> list[bytes]:
    """The raw items of `{"outcomes": [...]}`, each to be judged on its own; the envelope's own
    faults (unreadable, empty, past `max_items`) raise, refusing it whole."""
    batch = decoded(_batch_decoder, body)
    if not batch.outcomes:
        raise InvalidEvent("outcomes must hold at least one outcome")
    if len(batch.outcomes) > max_items:
        raise TooManyItems(f"at most {max_items} outcomes per batch, got {len(batch.outcomes)}")
    return [bytes(raw) for raw in batch.outcomes]


def decode_outcomes(body: bytes, max_items: int, now: datetime) -> list[Outcome | ScoringError]:
    """Each item of `{"outcomes": [...]}`: an outcome, or the error it alone got, in its slot."""
    return [judged(raw, now) for raw in outcome_items(body, max_items)]


def judged(body: bytes, now: datetime) -> Outcome | ScoringError:
    """One outcome, or the error it got (never raised: the item alone is refused)."""
    try:
        return decode_outcome(body, now)
    except ScoringError as exc:
        return exc


def decode_outcome(body: bytes, now: datetime) -> Outcome:
    """One outcome, checked, or `MalformedJson` / `InvalidEvent` / `EventExpired`."""
    outcome = decoded(_outcome_decoder, body)
    check(outcome, now)
    return outcome


def check(outcome: Outcome, now: datetime) -> None:
    """What the schema cannot say: text without control characters, a declared `other`, an instant
    neither in the future nor past the log's retention."""
    for field in ("event_id", "source_detail"):
        value = getattr(outcome, field)
        if value is not None and _CONTROL.search(value):
            raise InvalidEvent(f"Expected `str` without control characters - at `$.{field}`")
    if outcome.source == "other" and outcome.source_detail is None:
        raise InvalidEvent("source `other` must be declared in `source_detail` - at `$.source_detail`")
    try:
        learned = outcome.learned_at.astimezone(UTC)
    except OverflowError:
        raise InvalidEvent("Expected a timestamp within years 1..9999 in UTC - at `$.learned_at`") from None
    if learned > now + FUTURE_SKEW:
        raise InvalidEvent("learned_at is in the future (an outcome is learned, never foreseen) - at `$.learned_at`")
    if learned < now - timedelta(days=RETENTION_DAYS):
        raise EventExpired(f"learned_at is more than {RETENTION_DAYS} days ago: its decision is no longer kept")


def outcome_digest(outcome: Outcome, event: str) -> str:
    """32 hex digits naming the outcome's content (`event`: its hashed id; the instant in UTC)."""
    learned = outcome.learned_at.astimezone(UTC)
    amount = None if outcome.amount_lost is None else outcome.amount_lost + 0.0  # -0.0 is 0.0
    content = (event, outcome.outcome, outcome.source, outcome.source_detail, learned, amount)
    return hashlib.blake2b(_canonical.encode(content), digest_size=16).hexdigest()


def outcome_line(outcome: Outcome, event: str, received_at: datetime) -> OutcomeLine:
    """The line the log keeps for `outcome` (`event`: its id hashed with the log's key)."""
    return OutcomeLine(
        event,
        outcome.outcome,
        outcome.source,
        outcome.source_detail,
        outcome.learned_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        outcome.amount_lost,
        received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        outcome_digest(outcome, event),
    )
