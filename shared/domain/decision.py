"""The decision step: a local score becomes a decision, with the reason for it.

The core asks a `Decider` once per event, after the model has scored it. The default,
`ThresholdDecider`, applies the thresholds the model declares. Another step (the review
of the uncertain tail, shared/review) wraps a decider: it may change the decision, add its
own named score and say why, and the local answer stays there for it to fall back on.
`wait_s` is how long the caller can wait for such a step (the HTTP path less than the
queue's); `Review` says what became of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol, get_args

from shared.domain.events import PaymentEvent
from shared.domain.spec import Decision, Thresholds

__all__ = ["Decider", "Review", "ReviewStatus", "ThresholdDecider", "Verdict"]

DECISIONS: tuple[Decision, ...] = get_args(Decision)
ReviewStatus = Literal["done", "pending", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class Review:
    """What became of a second opinion: `done` (it decided), `pending` (still running: read
    it later by `id`), `failed` or `skipped` (the local decision stands; `reason` says why)."""

    status: ReviewStatus
    id: str
    reason: str = ""
    risk_score: float | None = None
    rationale: str = ""
    waited_s: float = 0.0  # how long the caller waited for it (the `llm` stage of its timings)

    def as_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"status": self.status, "id": self.id}
        if self.reason:
            body["reason"] = self.reason
        if self.risk_score is not None:
            body["risk_score"] = round(self.risk_score, 6)
        if self.rationale:
            body["rationale"] = self.rationale
        return body


class Verdict(NamedTuple):
    """A decision, why it was taken, every score that went into it (by source), and the
    review when one was asked for."""

    decision: Decision
    reason: str
    scores: Mapping[str, float]
    review: Review | None = None


class Decider(Protocol):
    """Turns one event's local score into a verdict, taking at most about `wait_s` (None: its default)."""

    async def decide(
        self, event: PaymentEvent, score: float, thresholds: Thresholds, wait_s: float | None = None
    ) -> Verdict: ...


class ThresholdDecider:
    """The model's own thresholds: below `review` approve, from `decline` up decline."""

    def __init__(self) -> None:
        # NOTE: the reasons of each thresholds object, worked out once (an f-string per event cost more)
        self._reasons: dict[int, tuple[Thresholds, dict[str, str]]] = {}

    async def decide(
        self, event: PaymentEvent, score: float, thresholds: Thresholds, wait_s: float | None = None
    ) -> Verdict:
        decision = thresholds.decide(score)
        known = self._reasons.get(id(thresholds))
        if known is None or known[0] is not thresholds:  # NOTE: an id may be reused once a spec is gone
            known = self._reasons[id(thresholds)] = (thresholds, {d: thresholds.reason(d) for d in DECISIONS})
        return Verdict(decision, known[1][decision], {"model": score})
