"""The decision recorder: what a decision leaves behind once it is answered.

    record / record_rows   a decision's record (shared/domain/records.py), built by reference on the
                           response path: to the shadow version (shared/fleet/shadow.py), which hands it
                           on to the log once scored, else straight to the prediction log (if sampled)
    explaining             an `?explain=1` answer's wait: a review that ends meanwhile is held
    review_settled         a review answered "pending" ended: its outcome follows its decision in the log
    explain_records        the log's writer asks for reason codes (PREDICTION_LOG_REASONS, opt-in)

Nothing here runs before an answer is sent but the record's construction; the log, the shadow and
their encoders work in background jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.answers import ReasonCode, Review
from shared.domain.decision import Verdict
from shared.domain.events import PaymentEvent
from shared.domain.records import Arm, DecisionRecord, Via
from shared.errors import ScoringError
from shared.features.mapping import FeatureRow
from shared.models.registry import ModelRegistry
from shared.models.served import LoadedModel, Row, Served
from shared.policies import DriftPolicy

if TYPE_CHECKING:
    from shared.fleet.shadow import ShadowScorer
    from shared.fleet.traffic import Traffic
    from shared.stores.prediction_log.log import PredictionLog

__all__ = ["DecisionRecorder"]

_NO_WHY: dict[str, str] = {}
_NO_TIMINGS: dict[str, float] = {}
_NO_ROW = np.zeros(0, dtype=np.float32)  # a review's outcome line: no features (they are its decision's)
MAX_AWAITING = 100_000  # logged decisions whose pending review's outcome is still owed to the log


class DecisionRecorder:
    """Records decisions for the prediction log and a model's shadow version."""

    def __init__(
        self,
        registry: ModelRegistry,
        drift: DriftPolicy,
        log: PredictionLog | None,
        traffic: Traffic | None,
        shadows: ShadowScorer | None,
    ) -> None:
        self._registry = registry
        self._drift = drift
        self._log = log
        self._traffic = traffic
        self._shadows = shadows
        # one test on the hot path: does anything want a decision's record?
        self.recording = log is not None or (traffic is not None and shadows is not None)
        # logged decisions answered "pending", by event id: their review's outcome follows them
        self._awaiting: dict[str, DecisionRecord] = {}
        # events told "pending" whose answer awaits its reason codes (?explain=1): a review that ends
        # meanwhile is held here, and its outcome written once the decision's record is made
        self._explaining: dict[str, tuple[Review, Verdict | None] | None] = {}

    def record(
        self,
        event: PaymentEvent,
        served: Served,
        row: FeatureRow,
        score: float,
        verdict: Verdict,
        timings: dict[str, float],
        via: Via,
        arm: Arm | None,
        reasons: list[ReasonCode] | None,
    ) -> None:
        """The decision's record, to the log (if sampled) and to the shadow version (if any)."""
        log = self._log
        logged = log is not None and log.wants()
        shadow = self._traffic.shadow_of(served.name) if self._traffic is not None else None
        if not logged and shadow is None:
            return
        record = DecisionRecord(
            at=time.time(),
            via=via,
            event_id=event.event_id,
            model=served.name,
            version=served.version,
            fingerprint=served.fingerprint,
            columns=served.mapper.columns,
            row=row.values,
            defaulted=row.why,
            score=score,
            decision=verdict.decision,
            reason=verdict.reason,
            timings=timings,
            review=verdict.review,
            arm=arm,
            thresholds=served.spec.thresholds,
            logged=logged,
            reasons=reasons,
        )
        self._dispatch(record, shadow, served)
        review = verdict.review
        if logged and review is not None and review.status == "pending" and len(self._awaiting) < MAX_AWAITING:
            self._awaiting[event.event_id] = record

    def record_rows(self, served: Served, rows: Sequence[Row], scores: list[float], via: Via) -> None:
        """Tensor-level rows (V2) leave records too: no event id, the decision their score takes."""
        log = self._log
        shadow = self._traffic.shadow_of(served.name) if self._traffic is not None else None
        thresholds = served.spec.thresholds
        now, columns, fingerprint = time.time(), served.mapper.columns, served.fingerprint
        for row, score in zip(rows, scores, strict=True):
            logged = log is not None and log.wants()
            if not logged and shadow is None:
                continue
            decision = thresholds.decide(score)
            record = DecisionRecord(
                at=now,
                via=via,
                event_id="",
                model=served.name,
                version=served.version,
                fingerprint=fingerprint,
                columns=columns,
                row=row,
                defaulted=_NO_WHY,
                score=score,
                decision=decision,
                reason=thresholds.reason(decision),
                timings=_NO_TIMINGS,
                thresholds=thresholds,
                logged=logged,
            )
            self._dispatch(record, shadow, served)

    # -- reviews that end after their answer ---------------------------------------------------

    def explaining(self, event_id: str) -> None:
        """An answer told "pending" waits for its reason codes: hold a review that ends meanwhile."""
        self._explaining[event_id] = None

    def explained(self, event_id: str) -> None:
        """The answer's record now exists: write the outcome of a review that ended meanwhile."""
        ended = self._explaining.pop(event_id, None)
        if ended is not None:
            self.review_settled(event_id, *ended)

    def review_settled(self, event_id: str, review: Review, verdict: Verdict | None) -> None:
        """A review answered "pending" ended: its outcome goes to the log after its decision's record,
        now, or once that record is made (a review can end inside an `?explain=1` answer's awaits)."""
        decided = self._awaiting.pop(event_id, None)
        if decided is not None:
            self._outcome(decided, review, verdict)
        elif event_id in self._explaining:  # NOTE: not recorded yet: `explained` hands it back after the record
            self._explaining[event_id] = (review, verdict)

    def _outcome(self, decided: DecisionRecord, review: Review, verdict: Verdict | None) -> None:
        """A settled review's outcome, as one more line of the log (`via="review"`), under the decision's
        hashed event id, model and version (the reader joins the two)."""
        if self._log is None:
            return
        score, decision, reason = decided.score, decided.decision, decided.reason  # the local decision stands
        if verdict is not None:
            score = review.risk_score if isinstance(review.risk_score, float) else score
            decision, reason = verdict.decision, verdict.reason
        self._log.add_outcome(
            DecisionRecord(
                at=time.time(),
                via="review",
                event_id=decided.event_id,
                model=decided.model,
                version=decided.version,
                fingerprint=decided.fingerprint,
                columns=(),
                row=_NO_ROW,
                defaulted=_NO_WHY,
                score=score,
                decision=decision,
                reason=reason,
                timings=_NO_TIMINGS,
                review=review,
            )
        )

    # -- the log's writer asks -------------------------------------------------------------------

    async def explain_records(self, records: Sequence[DecisionRecord]) -> None:
        """Reason codes for review and decline records that have none, one model run per version for
        the whole batch, in a worker thread (`explain_many`)."""
        from shared.models.explain import explain_many

        waiting: dict[tuple[str, str], list[DecisionRecord]] = {}
        for record in records:
            if record.reasons is None and record.decision in ("review", "decline"):
                waiting.setdefault((record.model, record.version), []).append(record)
        for (model, version), group in waiting.items():
            try:
                loaded = self._registry.active(model, version)
            except ScoringError:
                continue  # an ensemble, or a version retired meanwhile: the records go without
            if not loaded.inline:  # a heavy model: its occlusion runs would take the threads its answers need
                continue
            rows = np.array([r.row for r in group])
            codes = await explain_many(loaded, rows, np.array([r.score for r in group]), self._drift)
            for record, found in zip(group, codes or (), strict=False):
                record.reasons = found

    def _dispatch(self, record: DecisionRecord, shadow: LoadedModel | None, served: Served) -> None:
        if shadow is not None and shadow is not served and self._shadows is not None:
            self._shadows.offer(record, shadow)  # it hands the record on to the log once scored
        elif record.logged and self._log is not None:
            self._log.add(record)
