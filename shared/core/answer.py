"""An event's answer, built from its prediction and verdict: the score it reports, the source, the
timings, and what a caller may learn of a review; the `Scoring` record an event carries through the
data plane; and the share of events scored on defaults.

Pure functions of their inputs (the counting aside), on the hot path: each answer is built once,
by reference, with no second dict per event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from msgspec import UNSET

from shared.domain.answers import DefaultedWhy, EventStats, Reason, ReasonCode, Review, Scored, Source
from shared.domain.decision import Verdict
from shared.domain.events import PaymentEvent
from shared.domain.records import Arm, Via
from shared.features.mapping import FeatureRow
from shared.models.served import Prediction, Served

__all__ = ["DefaultedShare", "Scoring", "answer", "timings"]

WINDOW = 100  # events per window of the recent defaulted share
DEGRADED_SHARE = 0.5  # readiness lists the features as degraded past this recent defaulted share


@dataclass(slots=True)
class Scoring:
    """How an event is scored and what its stages took, carried from its door to its answer.

    started      when the core began (perf_counter; `parse_s` before it, at the door)
    wait_s       how long a review may hold the answer (None: the HTTP path's LLM_TIMEOUT_MS)
    via          the door it came by; `explain`: reason codes asked for (`?explain=1`)
    arm          under a canary split, the arm that scores it
    features_s, total_s, queued_s   seconds since `started` at the features' end and the verdict,
                                    and in the micro-batch's queue (set as the stages end)
    Events scored together (a batch request) share one.
    """

    started: float
    parse_s: float = 0.0
    wait_s: float | None = None
    via: Via = "http"
    explain: bool = False
    arm: Arm | None = None
    features_s: float = 0.0
    total_s: float = 0.0
    queued_s: float = 0.0


def timings(prediction: Prediction, scoring: Scoring) -> dict[str, float]:
    """An answer's `timings_ms`, from its prediction's cache and model time and its stages' seconds.

    Rounded as built, and to the microsecond by hand: `int(s * 1e6 + 0.5) / 1000` is
    `round(s * 1000, 3)` for durations (they could differ only on an exact tie) at a fifth of its cost.
    """
    parse_s, features_s, total_s, queued_s = scoring.parse_s, scoring.features_s, scoring.total_s, scoring.queued_s
    return {
        "parse": int(parse_s * 1e6 + 0.5) / 1000,
        "features": int(features_s * 1e6 + 0.5) / 1000,
        "cache": int(prediction.cache_s * 1e6 + 0.5) / 1000,
        "queue": int(queued_s * 1e6 + 0.5) / 1000,
        "inference": int(prediction.inference_s * 1e6 + 0.5) / 1000,
        "total": int((total_s + parse_s) * 1e6 + 0.5) / 1000,
    }


def answer(
    event: PaymentEvent,
    served: Served,
    row: FeatureRow,
    prediction: Prediction,
    verdict: Verdict,
    timed: dict[str, float],
    reasons: list[ReasonCode] | None,
    detail: bool,
    defaulted: bool = False,
) -> Scored:
    """The answer for one scored event. A review only ever raises the reported risk (never below the
    model's); `detail` (LLM_REVIEW_DETAIL): the reviewer's score and rationale beside the decision;
    `defaulted` (ANSWER_DEFAULTED): which user features took their default, and why. Off, the
    answer cannot tell a scoring caller whether a user exists (docs/security.md)."""
    source: Source = "model" if prediction.source == "model" else "cache"
    risk_score = prediction.score
    review = verdict.review
    if review is not None and review.status == "done":
        if isinstance(review.risk_score, float) and review.risk_score > risk_score:
            risk_score = review.risk_score
        source = "llm"
    scores = verdict.scores if prediction.parts is None else {**prediction.parts, **verdict.scores}
    if review is not None and not detail:  # the decision, not the reviewer's working
        review, scores = (
            Review(review.status, review.id, review.reason),
            {k: v for k, v in scores.items() if k != "llm"},
        )
    return Scored(
        event_id=event.event_id,
        risk_score=round(risk_score, 6),
        decision=verdict.decision,
        reason=verdict.reason,
        model=served.name,
        model_version=served.version,
        source=source,
        timings_ms=timed,
        defaulted=row.defaulted if defaulted else UNSET,
        defaulted_why=cast("dict[str, DefaultedWhy]", row.why) if defaulted and row.why else UNSET,
        scores={k: round(v, 6) for k, v in scores.items()} if len(scores) > 1 else UNSET,  # every opinion
        review=UNSET if review is None else review,
        reasons=[Reason.of(code) for code in reasons] if reasons else UNSET,
    )


class DefaultedShare:
    """How many events were scored with a user feature on its model default, overall and lately."""

    def __init__(self) -> None:
        self.events = 0
        self.defaulted = 0
        self._window = 0
        self.recent: float | None = None  # the share in the last full window of events

    def seen(self, defaulted: list[str]) -> None:
        """One more event answered; `defaulted`: with a user feature on its model default."""
        self.events += 1
        if defaulted:
            self.defaulted += 1
            self._window += 1
        if self.events % WINDOW == 0:  # a share per window of events, not a float op per event
            self.recent, self._window = self._window / WINDOW, 0

    def problem(self) -> str | None:
        if self.recent is not None and self.recent >= DEGRADED_SHARE:
            return f"features: {self.recent:.0%} of recent events scored on model defaults for user features"
        return None

    def stats(self) -> EventStats:
        share = round(self.defaulted / self.events, 4) if self.events else 0.0
        return EventStats(self.events, self.defaulted, share, round(self.recent or 0.0, 4))
