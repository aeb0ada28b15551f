"""The scoring core that no trigger owns: event in, risk decision out.

HTTP, Service Bus and Blob adapters decode their binding, call a method of this, and
encode the result; they never reach its parts. One instance per process serves them
all, so requests from every path land in the same micro-batches and share the caches.

    score_json / score_batch_json   bytes → validated events → scored (decoded and timed here)
    score / score_many              validated events → scored
    infer                           tensor level: feature rows → scores (protocols, ensembles)
    metadata / model_ready          a served name's versions, tensors and readiness (protocols)
    models / readiness / stats      what the adapters report
    report                          an adapter's own dependency failing, or well again (readiness lists it)
    review                          a review of the uncertain tail, by event id (shared/review)
    rollout / set_shadow / set_canary / abort_canary / promote_canary
                                    a model's shadow version, canary split and drift (shared/fleet)
    install_model / on_model        the lifecycle (Blob trigger, subscribers)
    background                      long-running jobs started and stopped with the core

Every decision can leave a record (shared/domain/records.py) for the prediction log and a
model's shadow version: built on the response path by reference, shadow-scored, explained,
encoded and written after the answer, in background jobs (shared/stores/prediction_log,
shared/fleet/shadow.py). A canary split routes an event by its user to the candidate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
from msgspec import UNSET

from shared.domain.answers import (
    ControlAction,
    DefaultedWhy,
    EnsembleView,
    EventStats,
    ModelView,
    Readiness,
    Reason,
    ReasonCode,
    Review,
    ReviewRecord,
    RolloutView,
    Scored,
    Source,
    Stats,
)
from shared.domain.decision import Decider, ThresholdDecider, Verdict
from shared.domain.events import PaymentEvent, decode_event, decode_events
from shared.domain.records import Arm, DecisionRecord, Via
from shared.domain.signature import ModelInfo, tensors
from shared.errors import (
    BatcherClosed,
    InferenceFailed,
    ModelNotFound,
    NotReady,
    ReviewNotFound,
    RolloutConflict,
    ScoringError,
)
from shared.features.mapping import FeatureRow
from shared.features.store import ContextStore
from shared.fleet.rollout import Rollout
from shared.models.ensembles.catalog import Ensembles
from shared.models.ensembles.ensemble import Ensemble
from shared.models.onnx import gpu_missing
from shared.models.registry import EventKind, Hook, ModelRegistry
from shared.models.repository import ModelRef
from shared.models.served import LoadedModel, Prediction, Row
from shared.runtime.admission import Admission
from shared.runtime.background import Background
from shared.settings import Settings
from shared.stores.cache.predictions import PredictionCache
from shared.stores.cache.tier import L2Tier
from shared.stores.control import Actor, ControlStore
from shared.telemetry import metrics

if TYPE_CHECKING:
    from shared.fleet.drift import DriftMonitor
    from shared.fleet.shadow import ShadowScorer
    from shared.fleet.traffic import Traffic
    from shared.review.reviewer import Reviewer
    from shared.stores.prediction_log.log import PredictionLog

__all__ = ["Inferred", "ScoringService"]

_NO_WHY: dict[str, str] = {}
_NO_TIMINGS: dict[str, float] = {}
_NO_ROW = np.zeros(0, dtype=np.float32)  # a review's outcome line: no features (they are its decision's)
MAX_AWAITING = 100_000  # logged decisions whose pending review's outcome is still owed to the log
DEGRADED_SHARE = 0.5  # readiness lists the features as degraded past this recent defaulted share
WINDOW = 100  # events per window of the recent defaulted share


@dataclass(frozen=True, slots=True)
class Inferred:
    """Scores for rows of features, from one model version."""

    model: str
    model_version: str
    scores: list[float]


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
        decider: Decider | None = None,
        reviewer: Reviewer | None = None,
        rollout: Rollout | None = None,
        ensembles: Ensembles | None = None,
        control: ControlStore | None = None,
        log: PredictionLog | None = None,
        traffic: Traffic | None = None,
        shadows: ShadowScorer | None = None,
        drift: DriftMonitor | None = None,
    ) -> None:
        self.settings = settings
        self.background = Background()
        self.admission = Admission(settings.admission)
        self._registry = registry
        self._features = features
        self._predictions = predictions
        self._l2 = l2
        self._reviewer = reviewer
        self._decider: Decider = decider or reviewer or ThresholdDecider()
        self._rollout = rollout
        self._ensembles = ensembles
        self._control = control  # NOTE: the rollout's and the reviews' store; this object closes it, last
        self._default = settings.default_model
        self._review_detail = settings.review.detail_in_answers
        self._events = 0
        self._defaulted = 0  # events scored with at least one user feature on its model default
        self._window_defaulted = 0
        self._recent_defaulted: float | None = None  # the share in the last full window of events
        self._record_stages = metrics.stages if settings.telemetry else None
        self._reported: dict[str, tuple[str, float]] = {}  # component -> (problem, since): adapters' dependencies
        self._log = log
        self._traffic = traffic
        self._shadows = shadows
        self._drift = drift
        # NOTE: one test on the hot path: does anything want a decision's record?
        self._recording = log is not None or (traffic is not None and shadows is not None)
        # logged decisions answered "pending", by event id: their review's outcome follows them
        self._awaiting: dict[str, DecisionRecord] = {}
        # events told "pending" whose answer awaits its reason codes (?explain=1): a review that ends
        # meanwhile is held here, and its outcome written once the decision's record is made
        self._explaining: dict[str, tuple[Review, Verdict | None] | None] = {}
        if log is not None and reviewer is not None:
            reviewer.settled = self._review_settled

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Load every model (honouring the fleet's pins), then start the background jobs."""
        if self._rollout is not None:
            await self._rollout.restore_pins()
        await self._registry.load_all()
        if self._ensembles is not None:
            await self._ensembles.load()
        if self._rollout is not None:
            self.background.add("rollout", self._rollout.run)
        if self._traffic is not None:
            await self._traffic.restore()
            self.background.add("traffic", self._traffic.run)
        if self._shadows is not None:
            self.background.add("shadow", self._shadows.run)
        if self._log is not None:
            if self.settings.prediction_log.reasons:  # NOTE: off, no occlusion runs for the log
                self._log.subscribe(self._explain_records)
            if self._drift is not None:
                self._log.subscribe(self._drift.observe)
                drift = self._drift
                self._registry.on("retired", lambda e: drift.forget(e.name, e.version))
            self.background.add("prediction_log", self._log.run)
        self.background.start()

    async def aclose(self) -> None:
        await self.background.aclose()
        if self._reviewer is not None:
            await self._reviewer.aclose()  # NOTE: first: the outcomes of pending reviews go on to the log
        if self._shadows is not None:
            await self._shadows.aclose()  # NOTE: first: what it holds goes on to the log
        if self._log is not None:
            await self._log.aclose()  # NOTE: sends what it holds, within PREDICTION_LOG_CLOSE_S
        await self._registry.aclose()
        if self._ensembles is not None:
            self._ensembles.release()
        if self._l2 is not None:
            await self._l2.aclose()
        await self._features.aclose()
        if self._control is not None:
            await self._control.aclose()

    async def install_model(self, ref: ModelRef, data: bytes) -> LoadedModel:
        """Load, validate, warm and activate a model version (the Blob trigger's path); tell the fleet."""
        loaded = await self._registry.install(ref.name, ref.version, data)
        if self._rollout is not None:
            await self._rollout.installed(loaded)
        return loaded

    async def pin(self, name: str, version: str, *, by: Actor | None = None) -> ModelView:
        """Serve `version` of `name` on every replica until `unpin` (rollback, or a hold on uploads)."""
        if self._rollout is not None:
            await self._rollout.pin(name, version, by=by)  # NOTE: `by`: who asked and why, audited
        else:
            await self._registry.pin(name, version)
        return self._describe(name)

    async def unpin(self, name: str, *, by: Actor | None = None) -> ModelView:
        """Release the pin: the newest version serves again, everywhere."""
        if self._rollout is not None:
            await self._rollout.unpin(name, by=by)
        else:
            await self._registry.unpin(name)
        return self._describe(name)

    def _describe(self, name: str) -> ModelView:
        return next(m for m in self._registry.describe() if m.name == name)

    # -- rollouts: shadow, canary, drift -------------------------------------------------

    def rollout(self, name: str) -> RolloutView:
        """What serves `name`, what shadows it, its canary split and its drift on this replica."""
        live = self._registry.active(name)  # NOTE: ModelNotFound first: an ensemble has no rollout
        shadow = canary = aborted = None
        if self._traffic is not None:
            shadow, canary, aborted = self._traffic.describe(name)
        drift = self._drift.describe(name) if self._drift is not None else []
        return RolloutView(name, live.version, self._registry.pins.get(name), shadow, canary, aborted, drift)

    async def set_shadow(self, name: str, version: str | None, *, by: Actor | None = None) -> RolloutView:
        """Score every event of `name` with `version` too, after its answer (None: no shadow), fleet-wide."""
        await self._traffic_or_refuse().set_shadow(name, version, by=by)
        return self.rollout(name)

    async def set_canary(self, name: str, version: str, weight: float, *, by: Actor | None = None) -> RolloutView:
        """Route `weight` of users (by a hash of user_id) to `version` of `name`, fleet-wide."""
        await self._traffic_or_refuse().set_canary(name, version, weight, by=by)
        return self.rollout(name)

    async def abort_canary(self, name: str, *, by: Actor | None = None) -> RolloutView:
        """Every user back to the live version (weight 0), fleet-wide; the abort is kept."""
        await self._traffic_or_refuse().abort(name, "api", by=by)
        return self.rollout(name)

    async def promote_canary(self, name: str, *, by: Actor | None = None) -> RolloutView:
        """The candidate becomes the pinned version everywhere; the split ends."""
        await self._traffic_or_refuse().promote(name, by=by)
        return self.rollout(name)

    async def control_actions(self, name: str) -> list[ControlAction]:
        """The last control actions on `name`, newest first: who, what, when and why."""
        return await self._rollout.audit.recent(name) if self._rollout is not None else []

    def _traffic_or_refuse(self) -> Traffic:
        if self._traffic is None:
            raise RolloutConflict("shadow scoring and canaries are not wired in this process")
        return self._traffic

    def on_model(self, kind: EventKind, hook: Hook) -> None:
        """Follow the models' lifecycle: `loaded`, `activated`, `retired`, `failed`."""
        self._registry.on(kind, hook)

    # -- what adapters report ----------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._registry.ready

    def readiness(self) -> Readiness:
        models = self._registry.names()
        missing = gpu_missing(self.settings.ort, self._sessions()) if self.settings.ort.require_gpu else None
        if missing is not None:
            return Readiness.refused(missing, models)
        if not self._registry.ready:
            return Readiness.refused("models are still loading", models)
        if self._default not in models:
            return Readiness.refused(f"DEFAULT_MODEL {self._default!r} names no loaded model", models)
        failing = self.background.failing()  # NOTE: a port this replica is reached through does not serve
        if failing:
            why = "; ".join(f"{name}: {problem}" for name, problem in sorted(failing.items()))
            return Readiness.refused(f"a listener is failing and restarting ({why})", models)
        return Readiness.serving(models, self._degraded())

    def _sessions(self) -> dict[str, list[str]]:
        """Each active model's session providers (what ONNX Runtime really runs it on)."""
        return {m.name: m.providers for m in self._registry.describe()}

    def _degraded(self) -> list[str]:
        """What the core serves with less than it should: it keeps serving, and says so.

        Each reason starts with its component (`redis: `, `models: `, `overloaded: `, ...), which
        the `scoring.degraded` metric carries as an attribute.
        """
        reasons: list[str | None] = [self.admission.problem()]
        if self._l2 is not None:
            reasons.append(self._l2.problem())
        reasons.append(self._registry.repository.problem())
        if self._rollout is not None:
            reasons.append(self._rollout.problem())
        if self._traffic is not None:
            reasons.append(self._traffic.problem())
        if self._log is not None:
            reasons.append(self._log.problem())
        if self._reviewer is not None:
            reasons.append(self._reviewer.problem())
        reasons.append(self._features.problem())
        share = self._recent_defaulted
        if share is not None and share >= DEGRADED_SHARE:
            reasons.append(f"features: {share:.0%} of recent events scored on model defaults for user features")
        now = time.monotonic()
        reasons += [f"{name}: {problem}, for {now - since:.0f} s" for name, (problem, since) in self._reported.items()]
        return [r for r in reasons if r]

    def report(self, component: str, problem: str | None) -> None:
        """An adapter's own dependency (e.g. the queue's publisher) fails (`problem`) or works
        again (None): readiness lists it as degraded from the first failure until the next success."""
        if problem is None:
            self._reported.pop(component, None)
        else:
            since = self._reported.get(component, ("", time.monotonic()))[1]
            self._reported[component] = (problem, since)

    def models(self) -> list[ModelView | EnsembleView]:
        """Every served name: the models, then the declared ensembles."""
        ensembles = self._ensembles.describe() if self._ensembles is not None else []
        return [*self._registry.describe(), *ensembles]

    def metadata(self, name: str, version: str | None = None) -> ModelInfo:
        """What `name` (a model or an ensemble) takes and gives; `ModelNotFound` if not served."""
        served = self._served(name, version)
        inputs, outputs = tensors(served.spec)
        if isinstance(served, Ensemble):
            return ModelInfo(name, [served.version], served.platform, inputs, outputs, _features(served))
        versions = self._registry.loaded_versions(name)
        return ModelInfo(name, versions, "onnx_onnxv1", inputs, outputs, _features(served))

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether `name` (at `version`) would serve a request now."""
        try:
            self._served(name, version)
        except (ModelNotFound, NotReady):
            return False
        return True

    def active(self, name: str | None = None, version: str | None = None) -> LoadedModel:
        """The version serving `name` (the default model if None), or the named loaded version."""
        return self._registry.active(name or self._default, version)

    def stats(self) -> Stats:
        events = EventStats(
            self._events,
            self._defaulted,
            round(self._defaulted / self._events, 4) if self._events else 0.0,
            round(self._recent_defaulted or 0.0, 4),
        )
        return Stats(
            events,
            self._predictions.stats,
            self._features.stats(),
            self._features.source,
            self._l2.stats if self._l2 is not None else None,
            self._reviewer.counts() if self._reviewer is not None else None,
            self.admission.stats(),
            self._log.stats() if self._log is not None else UNSET,
        )

    async def review(self, event_id: str) -> ReviewRecord:
        """The kept review of an event (done, pending or failed), or `ReviewNotFound`."""
        if self._reviewer is None:
            raise ReviewNotFound("reviews are off: AZURE_OPENAI_ENDPOINT is not set")
        record = await self._reviewer.record(event_id)
        if record is None:
            raise ReviewNotFound(f"no review of event {event_id!r} is kept (never asked for, or expired)")
        return record

    # -- scoring -------------------------------------------------------------------

    async def score_json(
        self, body: bytes, model: str | None = None, *, started: float | None = None, explain: bool = False
    ) -> Scored:
        """Decode, validate and score one JSON event; `started` is when the request began;
        `explain`: reason codes in a review or decline answer (`?explain=1`)."""
        started = time.perf_counter() if started is None else started
        async with self.admission.admitted():
            event = decode_event(body)
            return await self.score(event, model, parse_s=time.perf_counter() - started, explain=explain)

    async def score_batch_json(self, body: bytes, model: str | None = None) -> list[Scored | ScoringError]:
        """`{"events": [...]}`: every item scored in order; a bad item keeps its own error."""
        async with self.admission.admitted():
            return await self.score_many(decode_events(body, self.settings.max_batch_items), model)

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
                # NOTE: the version was swapped while this request waited; the new one answers.
                return await self._score(event, name, parse_s, review_wait_s, via, explain)
        except ModelNotFound as exc:
            if model is None:  # NOTE: nobody asked for it: the configuration is wrong, not the request
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
        except ModelNotFound:  # NOTE: an ensemble (or no such model: each event says so)
            return await self._score_each(events, model, via)
        split = self._traffic is not None and self._traffic.split(loaded.name)
        if not loaded.takes_rows or split:  # NOTE: run off the event loop: its rows share the batcher's batches
            return await self._score_each(events, model, via)
        try:
            return await self._score_together(events, loaded, via)
        except BatcherClosed:  # NOTE: the version was swapped while the rows waited: the new one answers
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
        if self._reviewer is None:  # NOTE: the local decider never waits: no task per event
            verdicts = [await decide(e, p.score, thresholds) for e, p in zip(valid, predictions, strict=True)]
        else:
            pairs = zip(valid, predictions, strict=True)
            verdicts = list(await asyncio.gather(*(decide(e, p.score, thresholds) for e, p in pairs)))
        t2 = time.perf_counter()
        spent = (t1 - t0, t2 - t0, 0.0)
        if self._reviewer is not None:  # NOTE: a review adds its own wait to an event's timings
            each = iter(
                [
                    self._answer(e, loaded, row, p, 0.0, v, spent, via=via)
                    for e, row, p, v in zip(valid, rows, predictions, verdicts, strict=True)
                ]
            )
            return [e if isinstance(e, ScoringError) else next(each) for e in events]
        # NOTE: the rows of one chunk share their timings: one dict each, recorded once with its count
        shared: dict[tuple[float, float], tuple[dict[str, float], list[int]]] = {}
        scored: list[Scored] = []
        for e, row, p, v in zip(valid, rows, predictions, verdicts, strict=True):
            found = shared.get((p.cache_s, p.inference_s))
            if found is None:
                found = shared[(p.cache_s, p.inference_s)] = (self._timings(p, 0.0, spent), [0])
            found[1][0] += 1
            scored.append(self._answer(e, loaded, row, p, 0.0, v, spent, timings=found[0], via=via))
        if self._record_stages is not None:
            for timings, (count,) in shared.values():
                self._record_stages(timings, count)
        answers = iter(scored)
        return [e if isinstance(e, ScoringError) else next(answers) for e in events]

    async def infer(self, name: str, version: str | None, rows: Sequence[Row], via: Via = "v2") -> Inferred:
        """Scores for feature rows (already in the model's column order), through caches and batches.

        `name` is a model or an ensemble; each row goes through the batcher as one request. Rows
        carry no user: a canary split does not route them (the live or the named version scores).
        """
        async with self.admission.admitted():
            try:
                return await self._infer(name, version, rows, via)
            except BatcherClosed:
                return await self._infer(name, version, rows, via)  # NOTE: swapped while waiting: the new one answers

    async def _infer(self, name: str, version: str | None, rows: Sequence[Row], via: Via) -> Inferred:
        served = self._served(name, version)
        rows_scored = [asyncio.ensure_future(served.score(row)) for row in rows]
        try:
            done = await asyncio.gather(*rows_scored)
        except BaseException:
            for pending in rows_scored:  # NOTE: a refused row fails the request: its siblings stop queueing
                pending.cancel()
            raise
        scores = [d.value.score for d in done]
        if self._recording:
            self._record_rows(served, rows, scores, via)
        return Inferred(served.name, served.version, scores)

    def _served(self, name: str, version: str | None = None) -> LoadedModel | Ensemble:
        """The model version or the ensemble that serves `name`."""
        try:
            return self._registry.active(name, version)
        except ModelNotFound:
            ensemble = self._ensembles.get(name) if self._ensembles is not None else None
            if ensemble is None:
                if self._ensembles is not None and self._ensembles.declared(name):
                    raise ModelNotFound(
                        f"ensemble {name!r} is not active: {self._ensembles.errors.get(name)}"
                    ) from None
                raise
            if version is not None and version != ensemble.version:
                raise ModelNotFound(f"ensemble {name!r} has no version {version!r}") from None
            return ensemble

    async def _score(
        self, event: PaymentEvent, name: str, parse_s: float, wait_s: float | None, via: Via, explain: bool
    ) -> Scored:
        t0 = time.perf_counter()
        try:
            loaded: LoadedModel | Ensemble = self._registry.active(name)
        except ModelNotFound:  # NOTE: a try costs nothing until it raises: the model path pays no lookup
            loaded = self._served(name)
        traffic = self._traffic
        if traffic is not None and traffic.split(name):
            return await self._score_split(event, name, loaded, traffic, (t0, parse_s, wait_s, via, explain))
        return await self._score_on(event, loaded, t0, parse_s, wait_s, via, explain)

    async def _score_split(
        self,
        event: PaymentEvent,
        name: str,
        live: LoadedModel | Ensemble,
        traffic: Traffic,
        how: tuple[float, float, float | None, Via, bool],
    ) -> Scored:
        """Under a canary split the user's arm scores, and its decision is counted for the
        automatic abort. A candidate that fails to score is counted as an error and the live
        version answers: a bad candidate costs its users nothing but the wait."""
        candidate = traffic.canary_for(name, event.user_id)
        if candidate is not None:
            try:
                scored = await self._score_on(event, candidate, *how, arm="canary")
            except InferenceFailed:
                traffic.observe(name, "canary", "error")
            else:
                traffic.observe(name, "canary", scored.decision)
                return scored
            return await self._score_on(event, live, *how)
        try:
            scored = await self._score_on(event, live, *how, arm="live")
        except InferenceFailed:
            traffic.observe(name, "live", "error")
            raise
        traffic.observe(name, "live", scored.decision)
        return scored

    async def _score_on(
        self,
        event: PaymentEvent,
        loaded: LoadedModel | Ensemble,
        t0: float,
        parse_s: float,
        wait_s: float | None,
        via: Via,
        explain: bool,
        arm: Arm | None = None,
    ) -> Scored:
        user = None
        if loaded.mapper.uses_user_features:
            user = await self._features.context(loaded.spec, event)
        t1 = time.perf_counter()
        row = loaded.mapper.row(event, user)
        done = await loaded.score(row.values)
        prediction = done.value
        verdict = await self._decider.decide(event, prediction.score, loaded.spec.thresholds, wait_s)
        t2 = time.perf_counter()
        reasons = ended = None
        if explain and verdict.decision != "approve" and isinstance(loaded, LoadedModel):
            from shared.models.explain import explain as explained  # NOTE: asked for by ?explain=1 only

            waiting = verdict.review is not None and verdict.review.status == "pending"
            if waiting:
                self._explaining[event.event_id] = None
            try:
                reasons = await explained(loaded, row.values, prediction.score, self.settings.drift)
            finally:
                ended = self._explaining.pop(event.event_id, None) if waiting else None
        spent = (t1 - t0, t2 - t0, done.queued_s)
        scored = self._answer(
            event, loaded, row, prediction, parse_s, verdict, spent, via=via, arm=arm, reasons=reasons
        )
        if ended is not None:  # NOTE: its review ended during the explanation: now its record exists
            self._review_settled(event.event_id, *ended)
        return scored

    @staticmethod
    def _timings(prediction: Prediction, parse_s: float, spent: tuple[float, float, float]) -> dict[str, float]:
        features_s, total_s, queued_s = spent
        # NOTE: rounded as built (no second dict per event), and to the microsecond by hand:
        # `int(s * 1e6 + 0.5) / 1000` is `round(s * 1000, 3)` for durations (they could differ only
        # on an exact tie) at a fifth of its cost, six times per event.
        return {
            "parse": int(parse_s * 1e6 + 0.5) / 1000,
            "features": int(features_s * 1e6 + 0.5) / 1000,
            "cache": int(prediction.cache_s * 1e6 + 0.5) / 1000,
            "queue": int(queued_s * 1e6 + 0.5) / 1000,
            "inference": int(prediction.inference_s * 1e6 + 0.5) / 1000,
            "total": int((total_s + parse_s) * 1e6 + 0.5) / 1000,
        }

    def _answer(
        self,
        event: PaymentEvent,
        served: LoadedModel | Ensemble,
        row: FeatureRow,
        prediction: Prediction,
        parse_s: float,
        verdict: Verdict,
        spent: tuple[float, float, float],
        *,
        timings: dict[str, float] | None = None,
        via: Via = "http",
        arm: Arm | None = None,
        reasons: list[ReasonCode] | None = None,
    ) -> Scored:
        """The answer for one scored event; `spent` is (features, total, queue) in seconds;
        `timings`, when given, are shared with other events and recorded by the caller."""
        self._events += 1
        if row.defaulted:
            self._defaulted += 1
            self._window_defaulted += 1
        if self._events % WINDOW == 0:  # NOTE: a share per window of events, not a float op per event
            self._recent_defaulted, self._window_defaulted = self._window_defaulted / WINDOW, 0
        source: Source = "model" if prediction.source == "model" else "cache"
        risk_score = prediction.score
        review = verdict.review
        if review is not None and review.status == "done":
            # NOTE: a review only ever raises the risk (shared/review/reviewer.py): never below the model's
            if isinstance(review.risk_score, float) and review.risk_score > risk_score:
                risk_score = review.risk_score
            source = "llm"
        if timings is None:
            timings = self._timings(prediction, parse_s, spent)
            if review is not None:
                timings["llm"] = round(verdict.waited_s * 1000, 3)
            if self._record_stages is not None:
                self._record_stages(timings)
        scores = verdict.scores if prediction.parts is None else {**prediction.parts, **verdict.scores}
        if self._recording:
            self._record(event, served, row, prediction.score, verdict, timings, via, arm, reasons)
        if review is not None and not self._review_detail:  # NOTE: the decision, not the reviewer's working
            review, scores = _outline(review), {k: v for k, v in scores.items() if k != "llm"}
        return Scored(
            event_id=event.event_id,
            risk_score=round(risk_score, 6),
            decision=verdict.decision,
            reason=verdict.reason,
            model=served.name,
            model_version=served.version,
            source=source,
            defaulted=row.defaulted,
            defaulted_why=cast("dict[str, DefaultedWhy]", row.why) if row.why else UNSET,  # NOTE: _why built it
            timings_ms=timings,
            # NOTE: more than the local model's: show every opinion
            scores={k: round(v, 6) for k, v in scores.items()} if len(scores) > 1 else UNSET,
            review=UNSET if review is None else review,
            reasons=[Reason.of(code) for code in reasons] if reasons else UNSET,
        )

    # -- decision records (shared/domain/records.py) ----------------------------------------

    def _record(
        self,
        event: PaymentEvent,
        served: LoadedModel | Ensemble,
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
            time.time(),
            via,
            event.event_id,
            served.name,
            served.version,
            getattr(served, "fingerprint", ""),
            served.mapper.columns,
            row.values,
            row.why,
            score,
            verdict.decision,
            verdict.reason,
            timings,
            verdict.review,
            arm,
            served.spec.thresholds,
            logged,
            None,
            reasons,
        )
        self._dispatch(record, shadow, served)
        review = verdict.review
        if logged and review is not None and review.status == "pending" and len(self._awaiting) < MAX_AWAITING:
            self._awaiting[event.event_id] = record

    def _review_settled(self, event_id: str, review: Review, verdict: Verdict | None) -> None:
        """A review answered "pending" ended: its outcome goes to the log after its decision's record,
        now, or once that record is made (a review can end inside an `?explain=1` answer's awaits)."""
        decided = self._awaiting.pop(event_id, None)
        if decided is not None:
            self._outcome(decided, review, verdict)
        elif event_id in self._explaining:  # NOTE: not recorded yet: `_score_on` hands it back after the record
            self._explaining[event_id] = (review, verdict)

    def _outcome(self, decided: DecisionRecord, review: Review, verdict: Verdict | None) -> None:
        """A settled review's outcome, as one more line of the log (`via="review"`), under the decision's
        hashed event id, model and version (the reader joins the two)."""
        if self._log is None:
            return
        score, decision, reason = decided.score, decided.decision, decided.reason  # NOTE: the local decision stands
        if verdict is not None:
            score = review.risk_score if isinstance(review.risk_score, float) else score
            decision, reason = verdict.decision, verdict.reason
        self._log.add_outcome(
            DecisionRecord(
                time.time(),
                "review",
                decided.event_id,
                decided.model,
                decided.version,
                decided.fingerprint,
                (),
                _NO_ROW,
                _NO_WHY,
                score,
                decision,
                reason,
                _NO_TIMINGS,
                review,
            )
        )

    def _record_rows(self, served: LoadedModel | Ensemble, rows: Sequence[Row], scores: list[float], via: Via) -> None:
        """Tensor-level rows (V2) leave records too: no event id, the decision their score takes."""
        log = self._log
        shadow = self._traffic.shadow_of(served.name) if self._traffic is not None else None
        thresholds = served.spec.thresholds
        now, columns, fingerprint = time.time(), served.mapper.columns, getattr(served, "fingerprint", "")
        for row, score in zip(rows, scores, strict=True):
            logged = log is not None and log.wants()
            if not logged and shadow is None:
                continue
            decision = thresholds.decide(score)
            record = DecisionRecord(
                now,
                via,
                "",
                served.name,
                served.version,
                fingerprint,
                columns,
                row,
                _NO_WHY,
                score,
                decision,
                thresholds.reason(decision),
                _NO_TIMINGS,
                None,
                None,
                thresholds,
                logged,
            )
            self._dispatch(record, shadow, served)

    def _dispatch(self, record: DecisionRecord, shadow: LoadedModel | None, served: LoadedModel | Ensemble) -> None:
        if shadow is not None and shadow is not served and self._shadows is not None:
            self._shadows.offer(record, shadow)  # NOTE: it hands the record on to the log once scored
        elif record.logged and self._log is not None:
            self._log.add(record)

    async def _explain_records(self, records: Sequence[DecisionRecord]) -> None:
        """The log's writer asks: reason codes for review and decline records that have none,
        one model run per version for the whole batch, in a worker thread (`explain_many`)."""
        from shared.models.explain import explain_many

        waiting: dict[tuple[str, str], list[DecisionRecord]] = {}
        for record in records:
            if record.reasons is None and record.decision in ("review", "decline"):
                waiting.setdefault((record.model, record.version), []).append(record)
        for (model, version), group in waiting.items():
            try:
                loaded = self._registry.active(model, version)
            except ScoringError:
                continue  # NOTE: an ensemble, or a version retired meanwhile: the records go without
            if not loaded.inline:  # NOTE: a heavy model: its occlusion runs would take the threads its answers need
                continue
            rows = np.array([r.row for r in group])  # NOTE: 0.28 µs a row where np.stack took 0.80
            codes = await explain_many(loaded, rows, np.array([r.score for r in group]), self.settings.drift)
            for record, found in zip(group, codes or (), strict=False):
                record.reasons = found


def _features(served: LoadedModel | Ensemble) -> list[str]:
    return [f.name for f in served.spec.features]


def _outline(review: Review) -> Review:
    """What a caller learns of a review: its status, its id and why it did not decide (LLM_REVIEW_DETAIL)."""
    return Review(review.status, review.id, review.reason)
