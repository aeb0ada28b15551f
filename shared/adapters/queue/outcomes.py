"""One invocation's batch of `risk-outcomes` messages: each outcome judged on its own.

    unpack      a message is one outcome, or an envelope `{"outcomes": [...]}` of up to
                MAX_BATCH_ITEMS (the body of `POST /api/outcomes`): each of its outcomes gets a
                verdict of its own under `<message id>#<index>`. The envelope's own faults (over
                MAX_MESSAGE_BYTES, unreadable, empty, too many) reject the message whole
    decode      unreadable, a schema violation, a source not declared, a `learned_at` in the
                future or past the log's retention → rejected at once, that outcome alone: its
                record (why, its message id, its body) goes to risk-rejected, so nothing is lost
    take        the rest in one call to the outcome desk: written, or a duplicate of one taken before
    outage      the store or its marks down: waited out inside the batch budget (backoff, full
                jitter: the `payments` rule, shared/adapters/queue/retry.py), then the batch
                fails and the host redelivers it; what was written before is a duplicate then

A fault of ours that one message meets (an exception no adapter translated) rejects that message
alone (`unexpected`), never its neighbours.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from shared.adapters.queue.budget import BatchBudget
from shared.adapters.queue.messages import (
    REJECTED_QUEUE,
    Incoming,
    Outbound,
    event_message_id,
    rejection_id,
    rejection_record,
)
from shared.adapters.queue.retry import held
from shared.domain.outcomes import Outcome, judged, outcome_items
from shared.errors import PayloadTooLarge, ScoringError, Unexpected

if TYPE_CHECKING:
    from shared.adapters.queue.publisher import Publisher
    from shared.core.outcomes import OutcomeDesk

__all__ = ["OUTCOMES_QUEUE", "OutcomeQueue", "Taken"]

OUTCOMES_QUEUE = "risk-outcomes"
Verdict = Literal["written", "duplicate", "rejected"]
# NOTE: the first key decides (as for the payments' envelopes): a single outcome costs one anchored match
_ENVELOPE = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"outcomes"[ \t\n\r]*:')


@dataclass(frozen=True, slots=True)
class Taken:
    """What became of one message."""

    message_id: str
    verdict: Verdict
    error: ScoringError | None = None


class OutcomeQueue:
    """The `risk-outcomes` batch over the outcome desk and the rejected queue's publisher."""

    def __init__(
        self,
        desk: OutcomeDesk,
        publisher: Publisher,
        *,
        max_message_bytes: int,
        budget: BatchBudget | None = None,
    ) -> None:
        self._desk = desk
        self._publisher = publisher
        self._cap = max_message_bytes
        self._max_items = desk.max_items  # an envelope holds what `POST /api/outcomes` takes
        self._budget = budget or BatchBudget()

    async def handle(self, batch: Sequence[Incoming]) -> list[Taken]:
        """Every outcome's verdict (an envelope's under `<id>#<index>`), in order; raises (after
        the budget) when the store stays down."""
        until = asyncio.get_running_loop().time() + self._budget.total_s - self._budget.publish_s
        now = self._desk.now()
        messages: list[Incoming] = []
        decoded: list[Outcome | ScoringError] = []
        for message in batch:
            for item, verdict in self._unpack(message, now):
                messages.append(item)
                decoded.append(verdict)
        valid = [d for d in decoded if isinstance(d, Outcome)]
        fresh = await held(until, lambda: self._desk.keep(valid, now), "keeping outcomes")
        written = iter(fresh)
        taken = [
            Taken(m.message_id, "rejected", d) if isinstance(d, ScoringError)
            else Taken(m.message_id, "written" if next(written) else "duplicate")
            for m, d in zip(messages, decoded, strict=True)
        ]  # fmt: skip
        rejected = [
            Outbound(REJECTED_QUEUE, rejection_record(m, d), rejection_id(m), m.correlation_id)
            for m, d in zip(messages, decoded, strict=True)
            if isinstance(d, ScoringError)
        ]
        if rejected:
            await held(until + self._budget.publish_s, lambda: self._publisher.publish(rejected), "publishing")
        return taken

    def _unpack(self, message: Incoming, now: datetime) -> list[tuple[Incoming, Outcome | ScoringError]]:
        """The message's outcomes, each judged: one, an envelope's each, or the message refused whole."""
        if len(message.body) > self._cap:
            return [(message, PayloadTooLarge(f"the message is over {self._cap} bytes (MAX_MESSAGE_BYTES)"))]
        if not _ENVELOPE.match(message.body):
            return [(message, _judge(message.body, now))]
        try:
            items = outcome_items(message.body, self._max_items)
        except ScoringError as exc:  # the envelope's own fault: the message whole
            return [(message, exc)]
        return [(self._item(message, i, raw), _judge(raw, now)) for i, raw in enumerate(items)]

    @staticmethod
    def _item(message: Incoming, index: int, body: bytes) -> Incoming:
        mid = event_message_id(message.message_id, index)
        return Incoming(
            mid, body, message.delivery_count, message.enqueued_time, message.correlation_id,
            message.properties, message.body, index,
        )  # fmt: skip


def _judge(body: bytes, now: datetime) -> Outcome | ScoringError:
    try:
        return judged(body, now)
    except Exception as exc:  # a fault of ours: this outcome alone
        return Unexpected(f"{type(exc).__name__} while decoding the outcome")
