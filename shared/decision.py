"""The decision step: a local score becomes a decision, with the reason for it.

The core asks a `Decider` once per event, after the model has scored it. The default,
`ThresholdDecider`, applies the thresholds the model declares. Another step (a review
of the uncertain tail, say) wraps a decider: it may change the decision, add its own
named score and say why, and the local answer stays there for it to fall back on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from shared.events import PaymentEvent
from shared.models.spec import Decision, Thresholds

__all__ = ["Decider", "ThresholdDecider", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision, why it was taken, and every score that went into it (by source)."""

    decision: Decision
    reason: str
    scores: Mapping[str, float]


class Decider(Protocol):
    """Turns one event's local score into a verdict."""

    async def decide(self, event: PaymentEvent, score: float, thresholds: Thresholds) -> Verdict: ...


class ThresholdDecider:
    """The model's own thresholds: below `review` approve, from `decline` up decline."""

    async def decide(self, event: PaymentEvent, score: float, thresholds: Thresholds) -> Verdict:
        decision = thresholds.decide(score)
        if decision == "decline":
            reason = f"score >= decline threshold {thresholds.decline}"
        elif decision == "review":
            reason = f"score >= review threshold {thresholds.review}"
        else:
            reason = f"score < review threshold {thresholds.review}"
        return Verdict(decision, reason, {"model": score})
