"""The scoring core that no trigger owns: event in, risk decision out.

HTTP, Service Bus and Blob adapters decode their binding, call this, and encode
the result. One instance per process serves them all, so requests from every
path land in the same micro-batches and share the caches.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal

from shared.batching import BatcherClosed
from shared.cache import PredictionCache, RedisTier
from shared.errors import ScoringError
from shared.events import PaymentEvent, decode_event
from shared.feature_store import FeatureStore
from shared.models import LoadedModel, ModelRef, ModelRegistry
from shared.settings import Settings

__all__ = ["Scored", "ScoringService"]

Source = Literal["model", "cache"]


@dataclass(frozen=True, slots=True)
class Scored:
    """The answer for one event."""

    event_id: str
    risk_score: float
    decision: str
    model: str
    model_version: str
    source: Source
    defaulted: list[str]
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "event_id": self.event_id,
            "risk_score": round(self.risk_score, 6),
            "decision": self.decision,
            "model": self.model,
            "model_version": self.model_version,
            "source": self.source,
            "defaulted": self.defaulted,
            "timings_ms": self.timings_ms,
        }


class ScoringService:
    """Scores payment events with the active model of a name, through features and caches."""

    def __init__(
        self,
        settings: Settings,
        registry: ModelRegistry,
        features: FeatureStore,
        predictions: PredictionCache,
        redis: RedisTier | None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.features = features
        self.predictions = predictions
        self.redis = redis

    @property
    def ready(self) -> bool:
        return self.registry.ready

    async def start(self) -> None:
        await self.registry.load_all()

    async def aclose(self) -> None:
        await self.registry.aclose()
        if self.redis is not None:
            await self.redis.aclose()

    async def score_json(self, body: bytes, model: str | None = None) -> Scored:
        """Decode, validate and score one JSON event (the queue path)."""
        started = time.perf_counter()
        event = decode_event(body)
        return await self.score(event, model, parse_s=time.perf_counter() - started)

    async def score(self, event: PaymentEvent, model: str | None = None, *, parse_s: float = 0.0) -> Scored:
        """Score one validated event with the active version of `model` (default model if None)."""
        try:
            return await self._score(event, model or self.settings.default_model, parse_s)
        except BatcherClosed:
            # NOTE: the version was swapped while this request waited; the new one answers.
            return await self._score(event, model or self.settings.default_model, parse_s)

    async def score_many(self, events: list[PaymentEvent | ScoringError], model: str | None = None) -> list[Scored | ScoringError]:
        """Score events concurrently (so they share batches); errors stay in their slot."""

        async def one(item: PaymentEvent | ScoringError) -> Scored | ScoringError:
            if isinstance(item, ScoringError):
                return item
            try:
                return await self.score(item, model)
            except ScoringError as exc:
                return exc

        return list(await asyncio.gather(*(one(e) for e in events)))

    async def install_model(self, ref: ModelRef, data: bytes) -> LoadedModel:
        """Load, warm and activate a new model version (the Blob trigger's path)."""
        return await self.registry.install(ref.name, ref.version, data)

    def stats(self) -> dict[str, object]:
        return {
            "predictions": self.predictions.stats.as_dict(),
            "features": self.features.cache.stats.as_dict(),
            "feature_source": self.features.source,
            "redis": vars(self.redis.stats) if self.redis is not None else None,
        }

    async def _score(self, event: PaymentEvent, name: str, parse_s: float) -> Scored:
        t0 = time.perf_counter()
        loaded = self.registry.active(name)
        user = None
        if loaded.mapper.uses_user_features:
            user, _ = await self.features.get(event.user_id)
        t1 = time.perf_counter()
        row = loaded.mapper.row(event, user)
        done = await loaded.score(row.values)
        t2 = time.perf_counter()
        prediction = done.value
        timings = {
            "parse": parse_s * 1000,
            "features": (t1 - t0) * 1000,
            "cache": prediction.cache_s * 1000,
            "queue": done.queued_s * 1000,
            "inference": prediction.inference_s * 1000,
            "total": (t2 - t0 + parse_s) * 1000,
        }
        return Scored(
            event_id=event.event_id,
            risk_score=prediction.score,
            decision=loaded.spec.thresholds.decide(prediction.score),
            model=loaded.name,
            model_version=loaded.version,
            source="model" if prediction.source == "model" else "cache",
            defaulted=row.defaulted,
            timings_ms={k: round(v, 3) for k, v in timings.items()},
        )
