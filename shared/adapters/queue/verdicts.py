"""A queue message on its way to its verdict: each gets exactly one (shared/adapters/queue/handler.py).

Delivery    one message of the batch, or one event of an envelope, with what decoding found
Handled     its verdict: completed, duplicate, rejected (its own fault) or failed (redelivered)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from shared.adapters.queue.messages import Incoming
from shared.domain.events import PaymentEvent
from shared.errors import EventIdConflict, ScoringError

__all__ = ["Delivery", "Handled", "Outcome", "conflict", "fail", "follow_primaries"]

Outcome = Literal["completed", "duplicate", "rejected", "failed"]


@dataclass(frozen=True, slots=True)
class Handled:
    """The verdict on one message, or one event of an envelope (`message_id` `<id>#<index>`):
    its result (or rejection record) and why, where it failed."""

    message_id: str
    outcome: Outcome
    body: bytes | None = None
    error: ScoringError | None = None

    @property
    def reason(self) -> str | None:
        return f"{self.error.code}: {self.error.detail}" if self.error is not None else None


@dataclass(slots=True)
class Delivery:
    """One message of the batch (or one event of an envelope) on its way to its verdict.

    `event` is None once decoding rejected it (its verdict says why); `primary` is the batch's
    first delivery of the same payment, whose verdict this one follows.
    """

    msg: Incoming
    span: Any = None  # the message's span, when sampled
    event: PaymentEvent | None = None
    digest: bytes = b""  # the payment's content digest, once decoded
    parse_s: float = 0.0
    primary: Delivery | None = None
    verdict: Handled | None = None

    @property
    def decoded(self) -> PaymentEvent:
        assert self.event is not None  # noqa: S101 narrows the type: only decoded deliveries get past decoding
        return self.event


def follow_primaries(batch: list[Delivery]) -> None:
    """A payment twice in one batch: the second gets the first's verdict (a result as a duplicate)."""
    for d in batch:
        if d.primary is not None:
            first = d.primary.verdict
            assert first is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
            outcome: Outcome = "duplicate" if first.outcome in ("completed", "duplicate") else first.outcome
            d.verdict = Handled(d.msg.message_id, outcome, first.body, first.error)


def conflict() -> EventIdConflict:
    """The refusal of a second payment under an event_id that names another."""
    return EventIdConflict(
        "this event_id already names a different payment; its first payment's result stands, and this one "
        "is neither scored nor given it (send a new event_id for a new payment)"
    )


def fail(which: list[Delivery], exc: ScoringError) -> None:
    """Each of `which` fails with `exc`: redelivered, nothing published for it."""
    for d in which:
        d.verdict = Handled(d.msg.message_id, "failed", None, exc)
