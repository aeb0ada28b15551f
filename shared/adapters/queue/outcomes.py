"""One invocation's batch of `risk-outcomes` messages: each message is one outcome, judged on its own.

    decode      over MAX_MESSAGE_BYTES, unreadable, a schema violation, a source not declared, a
                `learned_at` in the future or past the log's retention → rejected at once, that
                message alone: its record (why, its message id, its body) goes to risk-rejected,
                so nothing is lost
    take        the rest in one call to the outcome desk: written, or a duplicate of one taken before
    outage      the store or its marks down: waited out inside the batch budget (backoff, full
                jitter: the `payments` rule, shared/adapters/queue/handler.py), then the batch
                fails and the host redelivers it; what was written before is a duplicate then

A fault of ours that one message meets (an exception no adapter translated) rejects that message
alone (`unexpected`), never its neighbours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from shared.adapters.queue.handler import BatchBudget, _held
from shared.adapters.queue.messages import Incoming, Outbound, rejection_id, rejection_record
from shared.domain.outcomes import Outcome, decode_outcome
from shared.errors import PayloadTooLarge, ScoringError, Unexpected

if TYPE_CHECKING:
    from shared.adapters.queue.publisher import Publisher
    from shared.core.outcomes import OutcomeDesk

__all__ = ["OUTCOMES_QUEUE", "OutcomeQueue", "Taken"]

OUTCOMES_QUEUE = "risk-outcomes"
REJECTED_QUEUE = "risk-rejected"
Verdict = Literal["written", "duplicate", "rejected"]


@dataclass(frozen=True, slots=True)
class Taken:
    """What became of one message."""

    message_id: str
    verdict: Verdict
    error: ScoringError | None = None


class OutcomeQueue:
    """The `risk-outcomes` batch over the outcome desk and the rejected queue's publisher."""

    def __init__(
        self, desk: OutcomeDesk, publisher: Publisher, *, max_message_bytes: int, budget: BatchBudget | None = None
    ) -> None:
        self._desk = desk
        self._publisher = publisher
        self._cap = max_message_bytes
        self._budget = budget or BatchBudget()

    async def handle(self, messages: Sequence[Incoming]) -> list[Taken]:
        """Every message's verdict, in order; raises (after the budget) when the store stays down."""
        until = asyncio.get_running_loop().time() + self._budget.total_s - self._budget.publish_s
        now = self._desk.now()
        decoded: list[Outcome | ScoringError] = [self._decode(m, now) for m in messages]
        valid = [d for d in decoded if isinstance(d, Outcome)]
        fresh = await _held(until, lambda: self._desk.keep(valid, now), "keeping outcomes")
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
            await _held(until + self._budget.publish_s, lambda: self._publisher.publish(rejected), "publishing")
        return taken

    def _decode(self, message: Incoming, now: datetime) -> Outcome | ScoringError:
        if len(message.body) > self._cap:
            return PayloadTooLarge(f"the message is over {self._cap} bytes (MAX_MESSAGE_BYTES)")
        try:
            return decode_outcome(message.body, now)
        except ScoringError as exc:
            return exc
        except Exception as exc:  # a fault of ours: this message alone
            return Unexpected(f"{type(exc).__name__} while decoding the outcome")
