"""Wiring: the core built from settings, every part of it, in one place (`build_service`).

The lifecycle around it (built once per process, on first need; readiness until then) is
`shared.core.holder.ServiceHolder`.

The Functions worker imports `function_app.py` before any invocation and times out
slow imports, so heavy modules (onnxruntime, redis, azure SDKs) load inside
`build_service`, on first use.
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING

from shared.core.parts import Part
from shared.errors import NotReady, SettingsError
from shared.runtime.doctor import PlatformDoctor
from shared.settings import Settings

if TYPE_CHECKING:
    from shared.core.service import ScoringService
    from shared.domain.records import DecisionRecord
    from shared.features.store import ContextStore
    from shared.fleet.drift import DriftMonitor
    from shared.fleet.shadow import ShadowScorer
    from shared.fleet.traffic import Traffic
    from shared.fleet.versions import Rollout
    from shared.models.ensembles.catalog import Ensembles
    from shared.models.registry import ModelRegistry
    from shared.models.repository import ModelRepository
    from shared.models.vetting import VettingPolicy
    from shared.review.client import ReviewClient
    from shared.review.prompt import Opinion
    from shared.review.reviewer import Reviewer
    from shared.stores.cache.tier import L2Tier
    from shared.stores.control import ControlStore
    from shared.stores.prediction_log.log import PredictionLog

__all__ = [
    "build_reviewer",
    "build_rollouts",
    "build_service",
    "feast_store",
    "model_repository",
    "replica_name",
    "tune_gc",
]

log = logging.getLogger(__name__)


async def build_service(settings: Settings, *, vetting: VettingPolicy | None = None) -> ScoringService:
    """Wire the core from settings and load every model; returns a ready service.

    `vetting`: the static checks' policy (default: `shared.models.vetting.DEFAULT_POLICY`); tests of the
    score-time bounds open it, to meet files the checks would refuse.
    """
    from shared.core.admin import AdminPlane
    from shared.core.recorder import DecisionRecorder
    from shared.core.service import ScoringService
    from shared.features.store import FeatureStore, load_feature_file
    from shared.models.registry import ModelRegistry
    from shared.stores.cache.predictions import PredictionCache
    from shared.stores.cache.redis_tier import RedisTier

    redis = None
    if settings.redis_url:
        redis = RedisTier.from_url(
            settings.redis_url,
            timeout_s=settings.cache.redis_timeout_ms / 1000,
            prefix=settings.redis_prefix,
            use_entra=settings.redis_use_entra,
        )
    source = model_repository(settings)
    fallback = None
    if settings.features_file and redis is None:
        try:
            fallback = load_feature_file(settings.features_file)
        except (OSError, ValueError) as exc:
            log.error("cannot read FEATURES_FILE %s: %s", settings.features_file, exc)
            raise NotReady(f"FEATURES_FILE: cannot read the file ({type(exc).__name__})") from exc
    features: ContextStore = FeatureStore(
        redis=redis,
        fallback=fallback,
        l1_size=settings.cache.features_l1_size,  # its own size: CACHE_L1_SIZE=0 once sent every read to Redis
        l1_ttl_s=settings.cache.features_l1_ttl_s,
    )
    if settings.feature_store == "feast":
        features = feast_store(settings)
    policy = settings.cache
    predictions = PredictionCache(
        l1_size=policy.l1_size,
        l1_ttl_s=policy.l1_ttl_s,
        l2=redis,
        l2_ttl_s=policy.l2_ttl_s,
        l2_policy=policy.prediction_l2,
    )
    from shared.fleet.versions import Rollout
    from shared.models.sandbox import Sandbox
    from shared.models.vetting import DEFAULT_POLICY

    checks = vetting or DEFAULT_POLICY
    sandbox = Sandbox(
        policy=checks,
        max_batch=settings.batch.max_size,
        graph_optimization=settings.ort.graph_optimization,
        run_deadline_ms=settings.ort.run_deadline_ms,
        arena_max_mb=settings.ort.arena_max_mb,
    )
    registry = ModelRegistry(
        source,
        settings.ort,
        settings.batch,
        settings.models_keep_versions,
        predictions,
        catalogue=features.catalogue,
        sandbox=sandbox,
        vetting=checks,
        auto_promote=settings.promotes_on_arrival,
    )
    control = None
    if settings.redis_url:
        from shared.stores.control import RedisControlStore

        control = RedisControlStore.from_url(
            settings.redis_url, prefix=settings.redis_prefix, use_entra=settings.redis_use_entra
        )
    rollout = Rollout(registry, source, control, poll_s=settings.model_poll_s)
    from shared.models.ensembles.catalog import Ensembles

    ensembles = Ensembles(registry, source, settings.ort, settings.batch.max_size, sandbox=sandbox)
    reviewer = build_reviewer(settings, redis, control) if settings.review.enabled else None
    decisions, traffic, shadows, drift = build_rollouts(settings, registry, rollout, control)
    recorder = DecisionRecorder(registry, settings.drift, decisions, traffic, shadows)
    if decisions is not None and reviewer is not None:
        reviewer.on("settled", recorder.review_settled)
    service = ScoringService(
        settings,
        registry,
        features,
        predictions,
        redis,
        recorder=recorder,
        admin=AdminPlane(registry, rollout, traffic, drift, reviewer),
        parts=_parts(
            registry, features, redis, control, reviewer, rollout, ensembles, decisions, traffic, shadows, drift
        ),
        reviewer=reviewer,
        ensembles=ensembles,
        log=decisions,
        traffic=traffic,
    )
    if settings.telemetry:
        from shared.telemetry.setup import configure

        telemetry = configure(settings)  # once per process; later builds reuse it
        if telemetry is not None:
            telemetry.watch(service)  # before the first load: the first activations count
    try:
        await rollout.restore_pins()  # NOTE: before the first load: the fleet's pins apply here too
        await registry.load_all()
        await ensembles.load()
        await traffic.restore()
        if decisions is not None:
            if settings.prediction_log.reasons:  # off, no occlusion runs for the log
                decisions.on("batch", recorder.explain_records)
            if drift is not None:
                decisions.on("batch", drift.observe)
                registry.on("retired", lambda e: drift.forget(e.name, e.version))
        service.start()
    except BaseException:
        await service.aclose()  # NOTE: a failed build must not leak its sessions or Redis pool
        raise
    tune_gc(settings.gc_gen0_threshold)
    _say_how_it_started(service, settings, f"models from {source.description}, features from {features.source}")
    return service


def _say_how_it_started(service: ScoringService, settings: Settings, where: str) -> None:
    """`scoring service ready` only when readiness says so; else what is wrong, the value, the fix."""
    ready = service.health.readiness()
    redis = f"redis {'on at ' + _host(settings.redis_url) if settings.redis_url else 'off'}"
    if ready.status == "ready":
        log.info("scoring service ready: %s, %s", where, redis)
        return
    models = ", ".join(ready.models) or "none"
    fix = "see GET /api/health/ready"
    if settings.default_model not in ready.models:
        fix = (
            f"set DEFAULT_MODEL to one of the loaded models ({models}), or add "
            f"{settings.models_dir}/{settings.default_model}/<version>/model.onnx"
        )
    log.warning(
        "scoring service started but NOT ready (readiness answers 503): %s; fix: %s (%s, %s)",
        ready.detail,
        fix,
        where,
        redis,
    )


def _host(url: str | None) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url or "")
    return f"{parts.hostname}:{parts.port or 6379}" if parts.hostname else (parts.path or "?")


def _parts(
    registry: ModelRegistry,
    features: ContextStore,
    redis: L2Tier | None,
    control: ControlStore | None,
    reviewer: Reviewer | None,
    rollout: Rollout,
    ensembles: Ensembles,
    decisions: PredictionLog | None,
    traffic: Traffic,
    shadows: ShadowScorer,
    drift: DriftMonitor | None,
) -> list[Part]:
    """The core's collaborators, in their close order: the reviewer and the shadow hand records on to
    the log, so they close before it; the log before the models and stores; the control store last
    (the rollout's and the reviews' store)."""

    async def release_ensembles() -> None:
        ensembles.release()

    parts = [
        Part("llm", reviewer.problem, None, reviewer.aclose) if reviewer is not None else None,
        Part("rollout", rollout.problem, rollout.run),
        Part("traffic", traffic.problem, traffic.run),
        Part("shadow", None, shadows.run, shadows.aclose),
        Part("prediction_log", decisions.problem, decisions.run, decisions.aclose) if decisions is not None else None,
        # the fleet's drift references, exchanged off the log's writer
        Part("drift", None, drift.run) if drift is not None and control is not None else None,
        Part("models", registry.repository.problem, None, registry.aclose),
        Part("ensembles", None, None, release_ensembles),
        Part("redis", redis.problem, None, redis.aclose) if redis is not None else None,
        Part("features", features.problem, None, features.aclose),
        Part("control", None, None, control.aclose) if control is not None else None,
        Part("platform", PlatformDoctor().problem),
    ]
    return [part for part in parts if part is not None]


def build_rollouts(
    settings: Settings, registry: ModelRegistry, rollout: Rollout, control: ControlStore | None
) -> tuple[PredictionLog | None, Traffic, ShadowScorer, DriftMonitor | None]:
    """The prediction log (PREDICTION_LOG), the shadow and canary of each model (kept in the
    control store, like pins), and drift (fed by the log's records)."""
    from shared.fleet.shadow import ShadowScorer
    from shared.fleet.traffic import Traffic

    log = None
    replica = replica_name(settings.prediction_log.replica)
    if settings.prediction_log.enabled:
        from shared.stores.prediction_log.log import PredictionLog
        from shared.stores.prediction_log.sinks import sink_from_settings

        log = PredictionLog(settings.prediction_log, sink_from_settings(settings, replica), replica=replica)
    drift = None
    if log is not None and settings.drift.reference:
        from shared.fleet.drift import DriftMonitor

        drift = DriftMonitor(settings.drift, control, replica=replica)  # one reference per fleet, via Redis
    kept = log

    def emit(record: DecisionRecord) -> None:
        if kept is not None and record.logged:
            kept.add(record)

    shadows = ShadowScorer(settings.rollout, emit if log is not None else None)
    traffic = Traffic(registry, rollout, control, settings.rollout, scorer=shadows)
    return log, traffic, shadows, drift


def replica_name(replica: str | None) -> str:
    """This process's name in the prediction log's object names: the Container Apps replica
    (CONTAINER_APP_REPLICA_NAME), else the host name; and the process id (WORKERS > 1)."""
    import os
    import socket

    return f"{replica or socket.gethostname() or 'local'}-{os.getpid()}"


def build_reviewer(
    settings: Settings, redis: L2Tier | None, control: ControlStore | None, client: ReviewClient | None = None
) -> Reviewer:
    """The review of the uncertain tail (AZURE_OPENAI_ENDPOINT set): client, answer cache (the cache
    tier), store of outcomes (the store whose writes raise)."""
    from shared.domain.decision import ThresholdDecider
    from shared.review.client import AzureOpenAIClient
    from shared.review.prompt import Prompt
    from shared.review.reviewer import Reviewer
    from shared.review.store import ReviewStore
    from shared.stores.cache.l1 import TtlLru
    from shared.stores.cache.tiered import TieredCache

    policy = settings.review
    prompt = Prompt.load()
    answers: TieredCache[Opinion] = TieredCache(
        "llm",
        l1=TtlLru(10_000, policy.result_ttl_s),
        l2=redis,
        l2_ttl_s=policy.result_ttl_s,
        dump=_opinion_bytes,
        load=_opinion_or_none,
    )
    return Reviewer(
        ThresholdDecider(),
        policy,
        client or AzureOpenAIClient(policy, prompt),
        answers,
        ReviewStore(control, policy.result_ttl_s),
        prompt,
    )


def _opinion_bytes(opinion: Opinion) -> bytes:
    import msgspec

    return msgspec.json.encode(opinion)


def _opinion_or_none(payload: bytes) -> Opinion | None:
    from shared.errors import ReviewInvalid
    from shared.review.prompt import read_opinion

    try:
        return read_opinion(payload)
    except ReviewInvalid:
        return None  # a corrupt cached answer is a miss, never an error


def feast_store(settings: Settings) -> ContextStore:
    """The Feast online store at FEAST_REDIS_URL (else REDIS_URL), for FEAST_PROJECT."""
    from shared.features.feast import FeastStore

    url = settings.feast_redis_url or settings.redis_url
    if not url or not settings.feast_project:  # pragma: no cover - Settings refuses this combination
        raise SettingsError("FEAST_PROJECT: FEATURE_STORE=feast needs a project and a Redis URL")
    return FeastStore.from_url(
        url,
        project=settings.feast_project,
        timeout_s=settings.cache.redis_timeout_ms / 1000,
        use_entra=settings.redis_use_entra,
        l1_size=settings.cache.features_l1_size,
        l1_ttl_s=settings.cache.features_l1_ttl_s,
    )


def model_repository(settings: Settings) -> ModelRepository:
    """The configured model source: the Blob container when ModelStorage is set, else MODELS_DIR."""
    from shared.models.repository import BlobRepository, DirectoryRepository

    if settings.uses_blob_models:
        return BlobRepository.connect(
            container=settings.models_container,
            connection_string=settings.model_storage,
            blob_uri=settings.model_storage_blob_uri,
            max_bytes=settings.max_model_bytes,
        )
    return DirectoryRepository(settings.models_dir, max_bytes=settings.max_model_bytes)


def tune_gc(gen0_threshold: int) -> None:
    """Keep the cyclic garbage collector off the latency tail.

    with Python's default thresholds a full collection walks every object of the
    in-process caches (each TTL-LRU entry is several objects) every few thousand
    requests, a multiple of the p99 at 16 connections (docs/benchmark.md). Objects alive after
    start-up are frozen out of collection, and collections run far less often.
    """
    if gen0_threshold:
        gc.freeze()
        gc.set_threshold(gen0_threshold, 50, 100)
