"""The scoring core that no trigger owns: event in, risk decision out (the data plane).

HTTP, Service Bus and Blob adapters decode their binding, call a method of this, and
encode the result; they never reach its parts. One instance per process serves them
all, so requests from every path land in the same micro-batches and share the caches.

    score_json / score_batch_json   bytes → validated events → scored (decoded and timed here)
    score / score_many              validated events → scored
    infer / infer_decoded           tensor level: feature rows → scores (V2, ensembles; shared/core/inference.py)
    metadata / model_ready          a served name's versions, tensors and readiness (protocols)
    models / readiness / stats      what the adapters report
    report                          an adapter's own dependency failing, or well again (readiness lists it)
    admin                           the admin plane: install, pin, shadow, canary, promote, reviews
                                    (shared/core/admin.py)
    background                      long-running jobs started and stopped with the core

Every decision can leave a record for the prediction log and a model's shadow version: the
decision recorder (shared/core/recorder.py) builds it on the response path by reference; it is
shadow-scored, explained and written after the answer, in background jobs. A canary split routes
an event by its user to the candidate (shared/core/arms.py). The collaborators are `Part`s (shared/core/parts.py): one
list whose jobs start with the core, whose problems readiness lists, and which close in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from msgspec import UNSET

from shared.core.admin import AdminPlane
from shared.core.answer import DefaultedShare, Scoring, answer, timings
from shared.core.arms import by_arm
from shared.core.health import Health
from shared.core.inference import RowScoring
from shared.core.limits import Limits
from shared.core.names import ServedNames
from shared.core.parts import Part
from shared.core.recorder import DecisionRecorder
from shared.domain.answers import (
    EnsembleView,
    ModelView,
    Readiness,
    ReasonCode,
    Scored,
    Stats,
)
from shared.domain.decision import Decider, ThresholdDecider, Verdict
from shared.domain.events import PaymentEvent, decode_event, decode_events
from shared.domain.records import Arm, Via
from shared.domain.signature import ModelInfo
from shared.errors import BatcherClosed, ModelNotFound, NotReady, ScoringError
from shared.features.mapping import FeatureRow
from shared.features.store import ContextStore
from shared.models.ensembles.catalog import Ensembles
from shared.models.registry import ModelRegistry
from shared.models.served import LoadedModel, Prediction, Served
from shared.runtime.admission import Admission
from shared.runtime.background import Background
from shared.settings import Settings
from shared.stores.cache.predictions import PredictionCache
from shared.stores.cache.tier import L2Tier
from shared.telemetry import metrics

if TYPE_CHECKING:
    from shared.fleet.traffic import Traffic
    from shared.review.reviewer import Reviewer
    from shared.stores.prediction_log.log import PredictionLog

__all__ = ["ScoringService"]


class ScoringService:
    """Scores payment events with the active model of a name, through features and caches."""

    def __init__(
        self,
        settings: Settings,
        registry: ModelRegistry,
        features: ContextStore,
        predictions: PredictionCache,
        l2: L2Tier | None,
        *,
        recorder: DecisionRecorder,
        admin: AdminPlane,
        parts: Sequence[Part] = (),
        decider: Decider | None = None,
        reviewer: Reviewer | None = None,
        ensembles: Ensembles | None = None,
        log: PredictionLog | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        self.settings = settings
        self.limits = Limits.of(settings)  # what adapters must know of the settings
        self.background = Background()
        self.admission = Admission(settings.admission)
        self.admin = admin
        self._parts = tuple(parts)
        self._registry = registry
        self._features = features
        self._predictions = predictions
        self._l2 = l2
        self._reviewer = reviewer
        self._decider: Decider = decider or reviewer or ThresholdDecider()
        self._log = log
        self._traffic = traffic
        self._recorder = recorder
        self._default = settings.default_model
        self._review_detail = settings.review.detail_in_answers
        self._answer_defaulted = settings.answer_defaulted
        self._share = DefaultedShare()  # events scored with a user feature on its model default
        self._record_stages = metrics.stages if settings.telemetry else None
        self.names = ServedNames(registry, ensembles)
        rows = RowScoring(self.admission, self.names, recorder)  # NOTE: its methods as ours: no extra await
        self.infer, self.infer_decoded = rows.infer, rows.infer_decoded
        parts_problems = [p.problem for p in self._parts if p.problem is not None]
        self.health = Health(
            settings, registry, self.background, [self.admission.problem, *parts_problems, self._share.problem]
        )

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start every part's job (the models are loaded: shared/core/wiring.py)."""
        for part in self._parts:
            if part.run is not None:
                self.background.add(part.name, part.run)
        self.background.start()

    async def aclose(self) -> None:
        """Stop every job, then close the parts in their order."""
        await self.background.aclose()
        for part in self._parts:
            if part.close is not None:
                await part.close()

    def serve(self, name: str, listener: Callable[[], Awaitable[None]]) -> None:
        """Run an adapter's listener (a server on a port) as a core job: started and stopped with the
        core, restarted if it fails, and readiness says so while it does."""
        self.background.add(name, listener, serving=True)

    def refuses(self) -> bool:
        """Whether new work would be shed now (a fast path answers 503 before reading the body)."""
        return self.admission.refuses()

    # -- what adapters report ----------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._registry.ready

    def readiness(self) -> Readiness:
        return self.health.readiness()

    def report(self, component: str, problem: str | None) -> None:
        """An adapter's own dependency fails (`problem`) or works again (None): readiness lists it."""
        self.health.report(component, problem)

    def models(self) -> list[ModelView | EnsembleView]:
        """Every served name: the models, then the declared ensembles."""
        return self.names.describe()

    def metadata(self, name: str, version: str | None = None) -> ModelInfo:
        """What `name` (a model or an ensemble) takes and gives; `ModelNotFound` if not served."""
        return self.names.metadata(name, version)

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether `name` (at `version`) would serve a request now."""
        return self.names.ready(name, version)

    def active(self, name: str | None = None, version: str | None = None) -> LoadedModel:
        """The version serving `name` (the default model if None), or the named loaded version."""
        return self._registry.active(name or self._default, version)

    def stats(self) -> Stats:
        return Stats(
            self._share.stats(),
            self._predictions.stats,
            self._features.stats(),
            self._features.source,
            self._l2.stats if self._l2 is not None else None,
            self._reviewer.counts() if self._reviewer is not None else None,
            self.admission.stats(),
            self._log.stats() if self._log is not None else UNSET,
        )

    # -- scoring -------------------------------------------------------------------

    async def score_json(
        self,
        body: bytes,
        model: str | None = None,
        *,
        started: float | None = None,
        explain: bool = False,
        via: Via = "http",
    ) -> Scored:
        """Decode, validate and score one JSON event; `started` is when the request began;
        `explain`: reason codes in a review or decline answer (`?explain=1`); `via`: the door."""
        started = time.perf_counter() if started is None else started
        async with self.admission.admitted():
            event = decode_event(body)
            return await self.score(event, model, parse_s=time.perf_counter() - started, explain=explain, via=via)

    async def score_batch_json(self, body: bytes, model: str | None = None) -> list[Scored | ScoringError]:
        """`{"events": [...]}`: every item scored in order; a bad item keeps its own error."""
        async with self.admission.admitted():
            return await self.score_many(decode_events(body, self.settings.max_batch_items), model)

    async def score_events(
        self, events: Sequence[PaymentEvent | ScoringError], model: str | None = None
    ) -> list[Scored | ScoringError]:
        """Events a door decoded itself (a gRPC stream's message), each error in its slot: scored
        together in one admission slot, as `/api/score/batch` scores its items."""
        async with self.admission.admitted():
            return await self.score_many(events, model, via="grpc")

    async def score(
        self,
        event: PaymentEvent,
        model: str | None = None,
        *,
        parse_s: float = 0.0,
        review_wait_s: float | None = None,
        via: Via = "http",
        explain: bool = False,
    ) -> Scored:
        """Score one validated event with the active version of `model` (default model if None).

        `review_wait_s`: how long a review of the event may hold the answer (None: the
        HTTP path's LLM_TIMEOUT_MS; the queue path waits LLM_QUEUE_TIMEOUT_MS). `via`: the
        surface it came by (its decision record says so).
        """
        name = model or self._default
        try:
            try:
                return await self._score(event, name, parse_s, review_wait_s, via, explain)
            except BatcherClosed:
                # the version was swapped while this request waited; the new one answers.
                return await self._score(event, name, parse_s, review_wait_s, via, explain)
        except ModelNotFound as exc:
            if model is None:  # nobody asked for it: the configuration is wrong, not the request
                raise NotReady(f"DEFAULT_MODEL {self._default!r} names no loaded model") from exc
            raise

    async def score_many(
        self, events: Sequence[PaymentEvent | ScoringError], model: str | None = None, via: Via = "batch"
    ) -> list[Scored | ScoringError]:
        """Score events that arrived together; errors stay in their slot.

        Their rows run as their own model batches: one feature read per user, then one cache
        lookup and one model run per chunk of rows, with no window and no future per row.
        An ensemble, a model run off the event loop, a model under a canary split (each user
        to their arm) or a version swapped meanwhile takes the per-event path instead (the
        events then share batches with everything else).
        """
        try:
            loaded = self._registry.active(model or self._default)
        except ModelNotFound:  # an ensemble (or no such model: each event says so)
            return await self._score_each(events, model, via)
        split = self._traffic is not None and self._traffic.split(loaded.name)
        if not loaded.takes_rows or split:  # run off the event loop: its rows share the batcher's batches
            return await self._score_each(events, model, via)
        try:
            return await self._score_together(events, loaded, via)
        except BatcherClosed:  # the version was swapped while the rows waited: the new one answers
            return await self._score_each(events, model, via)

    async def _score_each(
        self, events: Sequence[PaymentEvent | ScoringError], model: str | None, via: Via
    ) -> list[Scored | ScoringError]:
        async def one(item: PaymentEvent | ScoringError) -> Scored | ScoringError:
            if isinstance(item, ScoringError):
                return item
            try:
                return await self.score(item, model, via=via)
            except ScoringError as exc:
                return exc

        return list(await asyncio.gather(*(one(e) for e in events)))

    async def _score_together(
        self, events: Sequence[PaymentEvent | ScoringError], loaded: LoadedModel, via: Via
    ) -> list[Scored | ScoringError]:
        t0 = time.perf_counter()
        valid = [e for e in events if not isinstance(e, ScoringError)]
        users = await self._features.contexts(loaded.spec, valid) if loaded.mapper.uses_user_features else None
        t1 = time.perf_counter()
        rows = loaded.mapper.rows(valid, users)
        predictions = await loaded.score_rows([row.values for row in rows])
        thresholds = loaded.spec.thresholds
        decide = self._decider.decide
        if self._reviewer is None:  # the local decider never waits: no task per event
            verdicts = [await decide(e, p.score, thresholds) for e, p in zip(valid, predictions, strict=True)]
        else:
            pairs = zip(valid, predictions, strict=True)
            verdicts = list(await asyncio.gather(*(decide(e, p.score, thresholds) for e, p in pairs)))
        spent = Scoring(t0, via=via, features_s=t1 - t0, total_s=time.perf_counter() - t0)  # shared by the events
        if self._reviewer is not None:  # a review adds its own wait to an event's timings
            each = iter(
                [
                    self._answer(e, loaded, row, p, v, spent)
                    for e, row, p, v in zip(valid, rows, predictions, verdicts, strict=True)
                ]
            )
            return [e if isinstance(e, ScoringError) else next(each) for e in events]
        # the rows of one chunk share their timings: one dict each, recorded once with its count
        shared: dict[tuple[float, float], tuple[dict[str, float], list[int]]] = {}
        scored: list[Scored] = []
        for e, row, p, v in zip(valid, rows, predictions, verdicts, strict=True):
            found = shared.get((p.cache_s, p.inference_s))
            if found is None:
                found = shared[(p.cache_s, p.inference_s)] = (timings(p, spent), [0])
            found[1][0] += 1
            scored.append(self._answer(e, loaded, row, p, v, spent, timed=found[0]))
        if self._record_stages is not None:
            for timed, (count,) in shared.values():
                self._record_stages(timed, count)
        answers = iter(scored)
        return [e if isinstance(e, ScoringError) else next(answers) for e in events]

    async def _score(
        self, event: PaymentEvent, name: str, parse_s: float, wait_s: float | None, via: Via, explain: bool
    ) -> Scored:
        scoring = Scoring(time.perf_counter(), parse_s, wait_s, via, explain)
        try:
            loaded: Served = self._registry.active(name)
        except ModelNotFound:  # a try costs nothing until it raises: the model path pays no lookup
            loaded = self.names.get(name)
        traffic = self._traffic
        if traffic is not None and traffic.split(name):
            return await by_arm(event, name, loaded, traffic, scoring, self._score_on)
        return await self._score_on(event, loaded, scoring)

    async def _score_on(self, event: PaymentEvent, loaded: Served, scoring: Scoring, arm: Arm | None = None) -> Scored:
        scoring.arm = arm
        user = None
        if loaded.mapper.uses_user_features:
            user = await self._features.context(loaded.spec, event)
        t1 = time.perf_counter()
        row = loaded.mapper.row(event, user)
        done = await loaded.score(row.values)
        prediction = done.value
        verdict = await self._decider.decide(event, prediction.score, loaded.spec.thresholds, scoring.wait_s)
        t2 = time.perf_counter()
        reasons, waiting = None, False
        if scoring.explain and verdict.decision != "approve" and loaded.explains:
            waiting = verdict.review is not None and verdict.review.status == "pending"
            if waiting:
                self._recorder.explaining(event.event_id)
            try:
                reasons = await loaded.reasons(row.values, prediction.score, self.settings.drift)
            except BaseException:
                if waiting:
                    self._recorder.explained(event.event_id)
                raise
        scoring.features_s, scoring.total_s, scoring.queued_s = (
            t1 - scoring.started,
            t2 - scoring.started,
            done.queued_s,
        )
        scored = self._answer(event, loaded, row, prediction, verdict, scoring, reasons=reasons)
        if waiting:  # a review that ended during the explanation: now its record exists
            self._recorder.explained(event.event_id)
        return scored

    def _answer(
        self,
        event: PaymentEvent,
        served: Served,
        row: FeatureRow,
        prediction: Prediction,
        verdict: Verdict,
        scoring: Scoring,
        *,
        timed: dict[str, float] | None = None,
        reasons: list[ReasonCode] | None = None,
    ) -> Scored:
        """The answer for one scored event, counted and recorded; `timed`, when given, is shared with
        other events and recorded by the caller."""
        self._share.seen(row.defaulted)
        if timed is None:
            timed = timings(prediction, scoring)
            if verdict.review is not None:
                timed["llm"] = round(verdict.waited_s * 1000, 3)
            if self._record_stages is not None:
                self._record_stages(timed)
        if self._recorder.recording:
            self._recorder.record(
                event, served, row, prediction.score, verdict, timed, scoring.via, scoring.arm, reasons
            )
        return answer(
            event, served, row, prediction, verdict, timed, reasons, self._review_detail, self._answer_defaulted
        )
