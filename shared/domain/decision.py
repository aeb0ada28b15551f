"""The decision step: a local score becomes a decision, with the reason for it.

The core asks a `Decider` once per event, after the model has scored it. The default,
`ThresholdDecider`, applies the thresholds the model declares. Another step (the review
of the uncertain tail, shared/review) wraps a decider: it may change the decision, add its
own named score and say why, and the local answer stays there for it to fall back on.
`wait_s` is how long the caller can wait for such a step (the HTTP path less than the
queue's); `Review` (an answer: shared/domain/answers.py) says what became of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol, get_args

from shared.domain.answers import Review, ReviewStatus
from shared.domain.events import PaymentEvent
from shared.domain.spec import Decision, Thresholds

__all__ = ["Decider", "Review", "ReviewStatus", "ThresholdDecider", "Verdict"]

DECISIONS: tuple[Decision, ...] = get_args(Decision)


class Verdict(NamedTuple):
    """A decision, why it was taken, every score that went into it (by source), the review
    when one was asked for, and how long the caller waited for it (the `llm` stage of its timings)."""

    decision: Decision
    reason: str
    scores: Mapping[str, float]
    review: Review | None = None
    waited_s: float = 0.0


class Decider(Protocol):
    """Turns one event's local score into a verdict, taking at most about `wait_s` (None: its default)."""

    async def decide(
        self, event: PaymentEvent, score: float, thresholds: Thresholds, wait_s: float | None = None
    ) -> Verdict: ...


class ThresholdDecider:
    """The model's own thresholds: below `review` approve, from `decline` up decline."""

    def __init__(self) -> None:
        # the reasons of each thresholds object, worked out once (docs/benchmark.md)
        self._reasons: dict[int, tuple[Thresholds, dict[str, str]]] = {}

    async def decide(
        self, event: PaymentEvent, score: float, thresholds: Thresholds, wait_s: float | None = None
    ) -> Verdict:
        decision = thresholds.decide(score)
        known = self._reasons.get(id(thresholds))
        if known is None or known[0] is not thresholds:  # NOTE: an id may be reused once a spec is gone
            known = self._reasons[id(thresholds)] = (thresholds, {d: thresholds.reason(d) for d in DECISIONS})
        return Verdict(decision, known[1][decision], {"model": score})
