"""Every setting the service reads, declared once, read once.

Each setting is one dataclass field declared with `setting(ENV_NAME, default, doc, ge=..., le=...)`
(shared/setting.py): its env name, type (the annotation), default, one-line doc and bounds live
together, and everything else is derived from them: parsing (`Settings.from_env`, the only reader
of the process environment), the checks of bounds and choices, `APP_SETTING_NAMES` (the infra
checks), docs/settings.md's table (`python -m shared.settings`, compared by a test) and the names
allowed in `local.settings.json.example`. A policy's `__post_init__` adds only the rules that tie
two settings together.

A bad value is a `SettingsError` whose message is one line naming the setting once and what it
expects (never the value of a secret). Tests build `Settings(...)` directly instead of patching
the environment.

NOTE: plain dataclasses rather than pydantic-settings: this module is read by the
infra checks' own venv and by the Functions cold path, so it imports nothing but the
standard library.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from shared.errors import SettingsError
from shared.policies import (
    AdmissionPolicy,
    BatchPolicy,
    CachePolicy,
    DriftPolicy,
    OrtOptions,
    PredictionLogPolicy,
    ReviewPolicy,
    RolloutPolicy,
    check,
)
from shared.setting import checked, declared, markdown_table, parse, setting, unknown_settings

__all__ = [
    "APP_SETTING_NAMES",
    "LOCAL_SETTING_NAMES",
    "AdmissionPolicy",
    "BatchPolicy",
    "CachePolicy",
    "DriftPolicy",
    "OrtOptions",
    "PredictionLogPolicy",
    "ReviewPolicy",
    "RolloutPolicy",
    "Settings",
    "SettingsError",
]

FeatureStoreKind = Literal["native", "feast"]
CLOCK_SKEW_S = 300.0  # how far ahead of this replica's clock an event's timestamp may be (queue path)


@dataclass(frozen=True)
class Settings:
    """The whole configuration of one process."""

    redis_url: str | None = setting(
        "REDIS_URL", None, "Redis for the L2 cache and the online feature store; unset → in-process only", secret=True
    )
    redis_prefix: str = setting("REDIS_KEY_PREFIX", "", "namespace for every key (several deployments on one Redis)")
    redis_use_entra: bool = setting(
        "REDIS_USE_ENTRA", False, "authenticate to Redis with a Microsoft Entra token (managed identity)"
    )
    models_dir: str = setting("MODELS_DIR", "models", "local model source, layout `{name}/{version}/model.onnx`")
    model_storage: str | None = setting(
        "ModelStorage",
        None,
        "Blob connection string: the blob container is the model source (locally: Azurite)",
        local_only=True,
        secret=True,
    )
    model_storage_blob_uri: str | None = setting(
        "ModelStorage__blobServiceUri", None, "the same with managed identity (Azure)"
    )
    models_container: str = setting("MODELS_CONTAINER", "models", "the blob container of models")
    model_poll_s: float = setting(
        "MODEL_POLL_SECONDS",
        5.0,
        "how often each replica checks its model source for new versions; `0` = never",
        ge=0,
        le=3600,
        noun="a number of seconds",
    )
    default_model: str = setting("DEFAULT_MODEL", "fraud", "the model `/api/score` and the queue use")
    features_file: str | None = setting(
        "FEATURES_FILE", "data/demo_users.json", "demo user features when Redis is not configured"
    )
    feature_store: FeatureStoreKind = setting(
        "FEATURE_STORE",
        "native",
        "where user features come from: `native` (`user:{id}` in REDIS_URL, else FEATURES_FILE) or `feast` "
        "(a Feast Redis online store, as `feast materialize` wrote it; docs/feast.md)",
    )
    feast_project: str | None = setting(
        "FEAST_PROJECT", None, "the Feast project whose online store is read (FEATURE_STORE=feast)"
    )
    feast_redis_url: str | None = setting(
        "FEAST_REDIS_URL",
        None,
        "the Redis of the Feast online store; unset → REDIS_URL (docs/capacity.md: a separate one keeps features unevicted)",
        secret=True,
    )
    answer_defaulted: bool = setting(
        "ANSWER_DEFAULTED",
        False,
        "scoring answers name the user features that took their model default (`defaulted`, `defaulted_why`); "
        "off: a scoring key cannot tell whether a user exists (the prediction log, metrics and readiness still say)",
    )
    batch: BatchPolicy = field(default_factory=BatchPolicy)
    cache: CachePolicy = field(default_factory=CachePolicy)
    ort: OrtOptions = field(default_factory=OrtOptions)
    review: ReviewPolicy = field(default_factory=ReviewPolicy)
    prediction_log: PredictionLogPolicy = field(default_factory=PredictionLogPolicy)
    rollout: RolloutPolicy = field(default_factory=RolloutPolicy)
    drift: DriftPolicy = field(default_factory=DriftPolicy)
    max_body_bytes: int = setting(
        "MAX_BODY_BYTES", 64 * 1024, "body cap of one event (a batch may carry 16 times that)", ge=1024
    )
    max_batch_items: int = setting(
        "MAX_BATCH_ITEMS", 256, "events per `/api/score/batch` and per queued envelope, rows per V2 infer request", ge=1
    )
    max_message_bytes: int = setting(
        "MAX_MESSAGE_BYTES",
        256 * 1024,
        "queue message cap: a larger body is rejected with an excerpt, never scored",
        ge=1024,
    )
    max_model_bytes: int = setting(
        "MAX_MODEL_BYTES",
        256 * 1024 * 1024,
        "model file cap: a larger file is refused before it is read whole",
        ge=1024,
    )
    body_timeout_ms: int = setting(
        "BODY_TIMEOUT_MS",
        5000,
        "longest wait for a request body to arrive whole (past it the answer is 408), and under `make run` "
        "for a request's headers (past it the connection is closed)",
        ge=100,
        le=600_000,
    )
    admission: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    workers: int = setting(
        "WORKERS",
        1,
        "processes `make run` serves with, each with its own warm sessions and L1 cache",
        local_only=True,
        ge=1,
        le=64,
    )
    models_keep_versions: int = setting(
        "MODELS_KEEP_VERSIONS", 2, "versions kept loaded per model (newest is active)", ge=1
    )
    auto_promote: bool | None = setting(
        "AUTO_PROMOTE",
        None,
        "a new model version serves on arrival (`true`) or waits as a candidate for a promote (`false`; "
        "docs/models.md); unset → on locally; always off with ModelStorage__blobServiceUri (Azure: `true` is refused)",
        local_only=True,
        shown_default="on locally, off in Azure",
    )
    gc_gen0_threshold: int = setting(
        "GC_GEN0_THRESHOLD",
        50_000,
        "Python GC generation-0 threshold after start-up (start-up objects frozen); `0` = Python's default",
        ge=0,
        why="0 keeps Python's default",
    )
    port: int = setting(
        "PORT",
        7071,
        "local port of `make run` (the Functions host owns it in Azure)",
        local_only=True,
        ge=1,
        le=65535,
        noun="a TCP port",
    )
    log_level: str = setting(
        "LOG_LEVEL",
        "INFO",
        "DEBUG, INFO, WARNING or ERROR: `make run`'s log level; no effect under the Functions host (host.json's `logLevel`)",
    )
    # -- telemetry (shared/telemetry) ------------------------------------------------------
    telemetry: bool = setting(
        "TELEMETRY", True, "metrics, traces and the rejection log; `false` turns them off (a benchmark's baseline)"
    )
    trace_sample_ratio: float = setting(
        "TRACE_SAMPLE_RATIO", 0.01, "share of requests without a sampled parent that are traced (0..1)", ge=0, le=1
    )
    applicationinsights_connection_string: str | None = setting(
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        None,
        "Application Insights: set → traces, metrics and logs go to Azure Monitor; unset → nothing is exported",
        secret=True,
    )
    applicationinsights_authentication_string: str | None = setting(
        "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
        None,
        "`Authorization=AAD;ClientId=<identity>`: Entra ingestion with that managed identity",
    )
    grpc_port: int = setting(
        "GRPC_PORT",
        0,
        "port of the gRPC server in the same process: Open Inference Protocol (V2) inference and payment events "
        "(`fraud.scoring.v1`); `0` = none",
        ge=1,
        le=65535,
        off="no gRPC server",
        noun="a TCP port",
    )
    grpc_keys: str | None = setting(
        "GRPC_KEYS",
        None,
        "keys a gRPC call must carry in its `x-api-key` metadata, comma-separated (two during a rotation); "
        "unset: only a server on loopback takes calls without one (docs/security.md)",
        secret=True,
    )
    grpc_max_concurrent: int = setting(
        "GRPC_MAX_CONCURRENT",
        64,
        "gRPC calls in progress at once; past it a call is refused (RESOURCE_EXHAUSTED)",
        ge=1,
        le=100_000,
    )
    grpc_stream_max_in_flight: int = setting(
        "GRPC_STREAM_MAX_IN_FLIGHT",
        16,
        "events one `ScoreStream` call holds at once, scored or answered but not yet sent; past it the stream "
        "is not read (HTTP/2 flow control holds the sender) until answers leave",
        ge=1,
        le=4096,
    )
    grpc_max_connection_age_ms: int = setting(
        "GRPC_MAX_CONNECTION_AGE_MS",
        120_000,
        "a gRPC connection older than this (±10%) is asked to go (GOAWAY) and its client reconnects: the "
        "port is balanced by connection, so this is how a scale-out reaches callers already connected",
        ge=1000,
        le=86_400_000,
    )
    grpc_max_connection_age_grace_ms: int = setting(
        "GRPC_MAX_CONNECTION_AGE_GRACE_MS",
        30_000,
        "how long the calls of a connection asked to go may still run (a stream past it is cut: UNAVAILABLE)",
        ge=0,
        le=86_400_000,
    )
    grpc_stream_idle_ms: int = setting(
        "GRPC_STREAM_IDLE_MS",
        300_000,
        "a `ScoreStream` call that neither sends an event nor takes an answer for this long is ended "
        "(DEADLINE_EXCEEDED, `stream_idle`): an idle or unread stream gives its call slot back",
        ge=100,
        le=86_400_000,
    )
    # -- the queue path (shared/queue) ---------------------------------------------------
    service_bus_namespace: str | None = setting(
        "ServiceBusConnection__fullyQualifiedNamespace",
        None,
        "Service Bus namespace: the trigger, and the SDK publisher of results (managed identity)",
    )
    service_bus_connection: str | None = setting(
        "ServiceBusConnection",
        None,
        "Service Bus connection string, the same locally (a connection string instead of an identity)",
        local_only=True,
        secret=True,
    )
    result_ttl_s: float = setting(
        "RESULT_TTL_S",
        3600.0,
        "how long Redis keeps a payment's result for redeliveries; > the queues' duplicate-detection window",
        ge=600,
        why="the duplicate-detection window, 10 min",
    )
    event_max_age_s: float = setting(
        "EVENT_MAX_AGE_S",
        3300.0,
        "the queue path's idempotency window: an event whose `timestamp` is older is rejected (`event_expired`), "
        "not scored again; <= RESULT_TTL_S - 300 (clock skew); 0: off (offline replays only)",
    )
    queue_batch_budget_ms: int = setting(
        "QUEUE_BATCH_BUDGET_MS",
        60_000,
        "longest one queue batch may take, reviews and publishing included; below the queue's lock "
        "duration, which nothing renews for a batch (docs/platform.md P1)",
        ge=6_000,
        le=270_000,
        why="a Service Bus lock lasts 5 minutes at most",
    )

    def __post_init__(self) -> None:
        checked(self)
        check(
            self.max_batch_items <= self.batch.max_queue,
            "MAX_BATCH_ITEMS",
            f"an integer <= {self.batch.max_queue}, a model version's queue: a V2 request's rows queue together",
        )
        check(
            not (self.grpc_port and self.workers > 1), "WORKERS", "1 when GRPC_PORT is set (one process binds the port)"
        )
        if self.grpc_keys is not None:
            keys = self.grpc_keys.split(",")
            check(
                all(16 <= len(k.strip()) <= 256 and k.strip().isascii() for k in keys) and len(keys) <= 4,
                "GRPC_KEYS",
                "1..4 comma-separated ASCII keys of 16..256 characters each",
            )
        check(
            self.log_level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), "LOG_LEVEL", "DEBUG|INFO|WARNING|ERROR"
        )
        if self.redis_url is not None:
            check(_is_redis_url(self.redis_url), "REDIS_URL", "a redis://, rediss:// or unix:// URL with a host")
        check(bool(self.default_model), "DEFAULT_MODEL", "a model name")
        if self.feature_store == "feast":
            check(bool(self.feast_project), "FEAST_PROJECT", "the Feast project name (FEATURE_STORE=feast)")
            check(bool(self.feast_redis_url or self.redis_url), "FEAST_REDIS_URL", "a Redis URL, or REDIS_URL set")
        if self.prediction_log.sink == "blob":
            check(
                self.uses_blob_models, "PREDICTION_LOG", "dir or off unless ModelStorage (or its blobServiceUri) is set"
            )
        if self.feast_redis_url is not None:
            check(_is_redis_url(self.feast_redis_url), "FEAST_REDIS_URL", "a redis://, rediss:// or unix:// URL")
        check(
            not (self.auto_promote and self.model_storage_blob_uri),
            "AUTO_PROMOTE",
            "unset or false with ModelStorage__blobServiceUri (Azure): there only the control plane promotes",
        )
        check(
            self.event_max_age_s == 0 or 0 < self.event_max_age_s <= self.result_ttl_s - CLOCK_SKEW_S,
            "EVENT_MAX_AGE_S",
            f"0 (off) or seconds within (0, RESULT_TTL_S - {CLOCK_SKEW_S:.0f}]: a result must outlive its window",
        )
        check(
            self.review.queue_timeout_ms < self.queue_batch_budget_ms,
            "LLM_QUEUE_TIMEOUT_MS",
            f"less than QUEUE_BATCH_BUDGET_MS ({self.queue_batch_budget_ms}): a review wait must fit in a batch",
        )

    @property
    def promotes_on_arrival(self) -> bool:
        """AUTO_PROMOTE as set, else on only where models do not come from Azure (no managed identity URI);
        never in Azure, where only the control plane promotes (a true there is a SettingsError)."""
        return not self.model_storage_blob_uri and self.auto_promote is not False

    @property
    def uses_blob_models(self) -> bool:
        return bool(self.model_storage or self.model_storage_blob_uri)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from `environ` (the process environment by default).

        An empty value means unset. A value that does not parse, or a combination that
        cannot run, is a one-line `SettingsError` naming the setting.
        """
        env = os.environ if environ is None else environ
        settings: Settings = parse(cls, env)
        if environ is None:  # NOTE: the process's own: a typo there is a setting silently ignored
            for line in unknown_settings(env, cls):
                logging.getLogger(__name__).warning("%s", line)
        return settings


def _is_redis_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port that is not a number
    except ValueError:
        return False
    if parts.scheme == "unix":
        return bool(parts.path)
    return parts.scheme in ("redis", "rediss") and bool(parts.hostname)


# Derived from the declarations: the infra checks assert each APP_SETTING_NAMES entry is set on
# the Container App; the local-only ones are a connection string (Azure uses the identity-based
# ModelStorage__blobServiceUri) and the port (the Functions host owns it in Azure).
APP_SETTING_NAMES: tuple[str, ...] = tuple(doc.env for doc, _, _ in declared(Settings) if not doc.local_only)
LOCAL_SETTING_NAMES: tuple[str, ...] = tuple(doc.env for doc, _, _ in declared(Settings) if doc.local_only)


if __name__ == "__main__":
    sys.stdout.write(markdown_table(Settings) + "\n")
