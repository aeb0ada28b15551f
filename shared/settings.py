"""Every setting the service reads, declared once, read once.

Each setting is one dataclass field declared with `setting(ENV_NAME, default, doc)`:
its env name, type (the annotation), default and one-line doc live together, and
everything else is derived from them: parsing (`Settings.from_env`, the only reader
of the process environment), `APP_SETTING_NAMES` (the infra checks), the README's
settings table (`python -m shared.settings`, compared by a test) and the names
allowed in `local.settings.json.example`.

A bad value is a `SettingsError` whose message is one line naming the setting and
what it expects (never the value of a secret). Tests build `Settings(...)` directly
instead of patching the environment.

NOTE: plain dataclasses rather than pydantic-settings: this module is read by the
infra checks' own venv and by the Functions cold path, so it imports nothing but the
standard library.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from shared.errors import SettingsError

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
    "SettingDoc",
    "Settings",
    "SettingsError",
    "declared",
    "markdown_table",
    "unknown_settings",
]

GraphOptimization = Literal["disable", "basic", "extended", "all"]
PredictionL2 = Literal["auto", "always", "never"]
FeatureStoreKind = Literal["native", "feast"]
PredictionSink = Literal["off", "dir", "blob"]
CLOCK_SKEW_S = 300.0  # how far ahead of this replica's clock an event's timestamp may be (queue path)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class SettingDoc:
    """What one field declares: the env name, its doc, and how it may be shown."""

    env: str
    doc: str
    local_only: bool = False  # not an app setting in Azure (the host or an identity replaces it)
    secret: bool = False  # never echoed in an error message
    shown_default: str | None = None  # how the README shows the default, when not the plain value


def setting(env: str, default: Any, doc: str, **options: Any) -> Any:
    """Declare one setting (a dataclass field carrying its `SettingDoc`)."""
    meta = {"setting": SettingDoc(env, doc, **options)}
    return field(default=default, metadata=meta)


def _fail(env: str, expected: str) -> SettingsError:
    return SettingsError(f"{env}: expected {expected}")


def _check(ok: bool, env: str, expected: str) -> None:
    if not ok:
        raise _fail(env, expected)


@dataclass(frozen=True)
class BatchPolicy:
    """How requests are grouped before the model runs.

    `window_ms`: the longest a request waits for company once a batch is open.
    `max_size`: a full batch runs at once. A lone request on an idle model never waits.
    """

    window_ms: float = setting("BATCH_WINDOW_MS", 5.0, "longest wait for a batch to fill once one is running")
    max_size: int = setting("BATCH_MAX_SIZE", 8, "rows per model run")
    # rows waiting for one model version at most, past it a fast 503 `overloaded`; fixed by design: a backstop
    # behind admission (MAX_INFLIGHT, MAX_QUEUED: what an operator tunes), four V2 requests of MAX_BATCH_ITEMS rows
    max_queue: int = 1024

    def __post_init__(self) -> None:
        _check(0 <= self.window_ms <= 1000, "BATCH_WINDOW_MS", f"a number within 0..1000, got {self.window_ms}")
        _check(1 <= self.max_size <= 1024, "BATCH_MAX_SIZE", f"an integer within 1..1024, got {self.max_size}")
        _check(
            self.max_queue >= self.max_size, "BatchPolicy.max_queue", f"rows >= BATCH_MAX_SIZE, got {self.max_queue}"
        )

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000.0


@dataclass(frozen=True)
class CachePolicy:
    """Sizes and lifetimes of the two cache tiers.

    Every prediction written to Redis carries a TTL (`l2_ttl_s` > 0): Redis runs
    volatile-lru, which evicts only keys with a TTL, so cache writes can never evict the
    feature store (whose keys have none). See docs/capacity.md.

    `prediction_l2`: whether predictions go through Redis. `auto` uses it only while a
    round-trip costs less than the model run it would save (both measured as they go);
    `always` and `never` fix the choice.
    """

    l1_size: int = setting("CACHE_L1_SIZE", 50_000, "predictions kept in the in-process LRU (0 disables that L1)")
    l1_ttl_s: float = setting("CACHE_L1_TTL_S", 30.0, "prediction lifetime in the in-process LRU, seconds")
    l2_ttl_s: float = setting(
        "CACHE_L2_TTL_S",
        3600.0,
        "prediction lifetime in Redis, seconds; > 0: under volatile-lru only keys with a TTL are evicted, never features",
    )
    features_l1_size: int = setting(
        "FEATURES_L1_SIZE", 100_000, "users whose features a replica keeps in process (0 reads Redis every time)"
    )
    features_l1_ttl_s: float = setting(
        "FEATURES_L1_TTL_S", 5.0, "how long a replica reuses a user's features before re-reading Redis"
    )
    redis_timeout_ms: float = setting(
        "REDIS_TIMEOUT_MS", 50.0, "deadline of one Redis round-trip; past it the read is a miss"
    )
    prediction_l2: PredictionL2 = setting(
        "PREDICTION_L2",
        "auto",
        "predictions through Redis: `auto` only while a round-trip costs less than the model run it saves",
    )

    def __post_init__(self) -> None:
        _check(self.prediction_l2 in ("auto", "always", "never"), "PREDICTION_L2", "one of auto|always|never")
        _check(self.l1_size >= 0, "CACHE_L1_SIZE", f"an integer >= 0, got {self.l1_size}")
        _check(self.features_l1_size >= 0, "FEATURES_L1_SIZE", f"an integer >= 0, got {self.features_l1_size}")
        _check(
            self.l2_ttl_s > 0, "CACHE_L2_TTL_S", f"a number > 0 (a prediction must be evictable), got {self.l2_ttl_s}"
        )
        for env, value in (
            ("CACHE_L1_TTL_S", self.l1_ttl_s),
            ("FEATURES_L1_TTL_S", self.features_l1_ttl_s),
            ("REDIS_TIMEOUT_MS", self.redis_timeout_ms),
        ):
            _check(value > 0, env, f"a number > 0, got {value}")


@dataclass(frozen=True)
class OrtOptions:
    """ONNX Runtime session options."""

    intra_op_threads: int = setting("ORT_INTRA_OP_THREADS", 1, "ONNX Runtime intra-op threads (0 = ORT decides)")
    # fixed by design: `all` is ONNX Runtime's fastest level for a model of any size (tests lower it)
    graph_optimization: GraphOptimization = "all"
    use_gpu: bool = setting("ORT_USE_GPU", True, "CUDA only when a GPU is really usable; else CPU")
    use_tensorrt: bool = setting("ORT_USE_TENSORRT", False, "TensorRT before CUDA when a GPU is usable")
    require_gpu: bool = setting(
        "ORT_REQUIRE_GPU",
        False,
        "readiness fails unless CUDA is usable (a GPU profile running the CPU image, or no GPU, is not ready)",
    )
    inline: bool = setting(
        "ORT_INLINE", True, "run small models on the event loop (no thread hop); `false` for big or GPU models"
    )
    run_deadline_ms: float = setting(
        "ORT_RUN_DEADLINE_MS",
        50.0,
        "longest one model run may take; a watchdog stops it (`RunOptions.terminate`) and its version is quarantined",
    )
    arena_max_mb: int = setting(
        "ORT_ARENA_MAX_MB",
        64,
        "the CPU memory all model runs of a process may hold together (one capped arena); past it a run fails",
    )

    def __post_init__(self) -> None:
        _check(self.intra_op_threads >= 0, "ORT_INTRA_OP_THREADS", "an integer >= 0 (0 lets ONNX Runtime choose)")
        _check(self.run_deadline_ms >= 1, "ORT_RUN_DEADLINE_MS", "a number of milliseconds >= 1")
        _check(self.arena_max_mb >= 16, "ORT_ARENA_MAX_MB", "an integer >= 16 (MiB)")
        _check(
            self.graph_optimization in ("disable", "basic", "extended", "all"),
            "OrtOptions.graph_optimization",
            "one of disable|basic|extended|all",
        )


@dataclass(frozen=True)
class AdmissionPolicy:
    """How much scoring work one process takes at once, how long the rest may wait (shared/runtime/admission.py).

    `max_inflight` requests are in the work at once; the next wait for a slot, at most
    `max_queue_wait_ms` (`queue_target_ms` while the wait queue stands: waits past the target
    for 100 ms of hand-overs), and no more than `max_queued` of them. Admitted work has `request_timeout_ms` to finish.
    """

    max_inflight: int = setting(
        "MAX_INFLIGHT",
        16,
        "scoring requests one process works on at once; the next ones wait for a slot (`0` = no cap, no wait)",
    )
    max_queued: int = setting(
        "MAX_QUEUED",
        64,
        "requests waiting for a slot at most; past it a fast 503 `overloaded` with Retry-After (docs/reliability.md: why 64)",
    )
    max_queue_wait_ms: float = setting(
        "MAX_QUEUE_WAIT_MS",
        20.0,
        "longest a request waits for a slot; past it a 503 `overloaded` (a part of the p99 budget of 50 ms)",
    )
    queue_target_ms: float = setting(
        "QUEUE_TARGET_MS",
        5.0,
        "longest wait while the wait queue stands (waits past it for 100 ms of hand-overs: overload, not a burst)",
    )
    request_timeout_ms: int = setting(
        "REQUEST_TIMEOUT_MS",
        2000,
        "longest a scoring request may work once admitted; past it the work is dropped, the answer a 503",
    )

    def __post_init__(self) -> None:
        _check(self.max_inflight >= 0, "MAX_INFLIGHT", f"an integer >= 0 (0: no cap), got {self.max_inflight}")
        _check(self.max_queued >= 0, "MAX_QUEUED", f"an integer >= 0, got {self.max_queued}")
        _check(0 < self.max_queue_wait_ms <= 10_000, "MAX_QUEUE_WAIT_MS", "a number of ms within (0, 10000]")
        _check(
            0 < self.queue_target_ms <= self.max_queue_wait_ms,
            "QUEUE_TARGET_MS",
            "a number of ms > 0 and <= MAX_QUEUE_WAIT_MS",
        )
        _check(50 <= self.request_timeout_ms <= 600_000, "REQUEST_TIMEOUT_MS", "an integer within 50..600000")


@dataclass(frozen=True)
class ReviewPolicy:
    """The second opinion on the uncertain tail (shared/review): Azure OpenAI, bounded.

    Off unless `endpoint` is set. An event goes for review when its local score falls in
    [`band_low`, `band_high`] or it carries a free-text `note`. The HTTP path waits at most
    `timeout_ms` for the review (then answers locally, review pending); the queue path
    `queue_timeout_ms`. `max_rps` and `max_share` cap the rate and the share of scored events
    reviewed; `breaker_failures` consecutive failures open the breaker for `breaker_reset_s`.
    """

    endpoint: str | None = setting(
        "AZURE_OPENAI_ENDPOINT", None, "Azure OpenAI endpoint for reviews of the uncertain tail; unset → no reviews"
    )
    deployment: str = setting("AZURE_OPENAI_DEPLOYMENT", "review", "the chat deployment reviews ask")
    api_key: str | None = setting(
        "AZURE_OPENAI_API_KEY",
        None,
        "API key; unset → Microsoft Entra ID (managed identity in Azure, whose role infra/ grants)",
        local_only=True,
        secret=True,
    )
    band_low: float = setting("LLM_BAND_LOW", 0.45, "lowest local score that goes for review")
    band_high: float = setting("LLM_BAND_HIGH", 0.75, "highest local score that goes for review")
    review_notes: bool = setting(
        "LLM_REVIEW_NOTES", True, "events with a free-text `note` go for review too (a review can only escalate)"
    )
    may_lower: bool = setting(
        "LLM_REVIEW_MAY_LOWER",
        False,
        "a review may lower a local decline to `review` when the score is inside the band (never to approve; "
        "counted as `lowered`); off: a review only ever escalates",
    )
    detail_in_answers: bool = setting(
        "LLM_REVIEW_DETAIL",
        False,
        "reviewed answers carry the reviewer's score and rationale and the model's own score; off: the decision "
        "only (the detail stays at /api/reviews/{event_id}, an admin-key route)",
    )
    timeout_ms: float = setting(
        "LLM_TIMEOUT_MS", 150.0, "longest an HTTP request waits for its review; then it answers locally, review pending"
    )
    queue_timeout_ms: float = setting(
        "LLM_QUEUE_TIMEOUT_MS", 5000.0, "longest the queue path waits for a review before it publishes"
    )
    call_timeout_ms: float = setting(
        "LLM_CALL_TIMEOUT_MS", 10_000.0, "longest one call to Azure OpenAI may take, in the background too"
    )
    max_rps: float = setting("LLM_MAX_RPS", 20.0, "reviews started per second, per replica (token bucket)")
    max_share: float = setting("LLM_MAX_SHARE", 0.25, "largest share of scored events reviewed, per replica")
    # fixed by design (tests shorten them): 5 failures in a row (timeouts, 429, 5xx, bad answers) open the
    # breaker for 30 s, then one probe decides; LLM_MAX_RPS and LLM_MAX_SHARE are the budget an operator sets
    breaker_failures: int = 5
    breaker_reset_s: float = 30.0
    result_ttl_s: float = setting(
        "REVIEW_TTL_S", 86_400.0, "how long a review stays readable at `/api/reviews/{event_id}` (and cached)"
    )

    def __post_init__(self) -> None:
        _check(0.0 <= self.band_low <= self.band_high <= 1.0, "LLM_BAND_LOW", "0 <= LLM_BAND_LOW <= LLM_BAND_HIGH <= 1")
        for env, value in (
            ("LLM_TIMEOUT_MS", self.timeout_ms),
            ("LLM_QUEUE_TIMEOUT_MS", self.queue_timeout_ms),
            ("LLM_CALL_TIMEOUT_MS", self.call_timeout_ms),
        ):
            _check(0 <= value <= 600_000, env, f"milliseconds within 0..600000, got {value}")
        _check(self.max_rps > 0, "LLM_MAX_RPS", f"a number > 0, got {self.max_rps}")
        _check(0 < self.max_share <= 1, "LLM_MAX_SHARE", f"a share within (0, 1], got {self.max_share}")
        _check(self.breaker_failures >= 1, "ReviewPolicy.breaker_failures", "an integer >= 1")
        _check(self.breaker_reset_s > 0, "ReviewPolicy.breaker_reset_s", "a number of seconds > 0")
        _check(self.result_ttl_s >= 60, "REVIEW_TTL_S", "a number of seconds >= 60")
        if self.endpoint is not None:
            scheme = urlsplit(self.endpoint).scheme
            _check(scheme in ("https", "http"), "AZURE_OPENAI_ENDPOINT", "an https:// URL")
            _check(bool(self.deployment), "AZURE_OPENAI_DEPLOYMENT", "a deployment name")

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None


@dataclass(frozen=True)
class PredictionLogPolicy:
    """The record of every decision (shared/stores/prediction_log): where it goes and how much is held.

    Off unless `sink` is set: `dir` writes hourly JSONL files under `directory` (`make run`),
    `blob` appends hourly JSONL blobs to `container` of the model storage account (Azure;
    Azurite locally). A share `sample` of decisions is kept; at most `buffer` records wait
    in memory for the background writer (past it they are dropped and counted, never
    waited for); it writes every `flush_s`, and on shutdown for at most 5 s (log.py's CLOSE_S).
    """

    sink: PredictionSink = setting(
        "PREDICTION_LOG", "off", "where each decision's record goes: `off`, `dir` (PREDICTION_LOG_DIR) or `blob`"
    )
    directory: str = setting(
        "PREDICTION_LOG_DIR", ".run/predictions", "the local directory of the prediction log (PREDICTION_LOG=dir)"
    )
    container: str = setting(
        "PREDICTION_LOG_CONTAINER",
        "predictions",
        "the blob container of the prediction log, in the model storage account (PREDICTION_LOG=blob)",
    )
    sample: float = setting("PREDICTION_LOG_SAMPLE", 1.0, "share of decisions recorded (0..1; 1 = every one)")
    # records held for the writer (past it new ones are dropped, counted) and how often it sends them; fixed
    # by design (tests shorten them): 5 s of 10,000 decisions a second; docs/benchmark.md measured 1 s vs 0.25 s
    buffer: int = 50_000
    flush_s: float = 1.0
    replica: str | None = setting(
        "CONTAINER_APP_REPLICA_NAME",
        None,
        "this replica's name in the log's object names; Container Apps sets it (a replica's host name is the same)",
        local_only=True,
    )
    reasons: bool = setting(
        "PREDICTION_LOG_REASONS",
        False,
        "reason codes in the log's review and decline records too (off: only `?explain=1` answers carry them)",
    )
    hash_key: str | None = setting(
        "PREDICTION_LOG_HASH_KEY",
        None,
        "key of the keyed BLAKE2b hash of event ids in the log (whoever holds it can join chargebacks); unset → unkeyed",
        secret=True,
    )

    def __post_init__(self) -> None:
        _check(self.sink in ("off", "dir", "blob"), "PREDICTION_LOG", "one of off|dir|blob")
        _check(0.0 <= self.sample <= 1.0, "PREDICTION_LOG_SAMPLE", f"a share within 0..1, got {self.sample}")
        _check(100 <= self.buffer <= 10_000_000, "PredictionLogPolicy.buffer", "an integer within 100..10000000")
        _check(0.05 <= self.flush_s <= 300, "PredictionLogPolicy.flush_s", "a number of seconds within 0.05..300")
        _check(bool(self.container), "PREDICTION_LOG_CONTAINER", "a blob container name")
        if self.hash_key is not None:
            _check(len(self.hash_key.encode()) <= 64, "PREDICTION_LOG_HASH_KEY", "at most 64 bytes")

    @property
    def enabled(self) -> bool:
        return self.sink != "off" and self.sample > 0


@dataclass(frozen=True)
class RolloutPolicy:
    """Shadow scoring and the sticky canary (shared/fleet/traffic.py, shared/fleet/shadow.py).

    A shadow version scores each event after its answer is sent, through a queue of at most
    `shadow_queue` events (past it they are dropped and counted). A canary's automatic abort
    compares the candidate's last `canary_window` decisions with the live version's: once
    both arms hold `canary_min_events`, a decline share or an error rate that departs from
    the live one's by more than its bound, and by at least 4.5 standard errors (a pooled
    two-proportion z test: shared/fleet/traffic.py), sets the candidate's weight to 0, fleet-wide.
    """

    # events waiting for their shadow score at most, past it dropped and counted; fixed by design (tests
    # shorten it): a second of 10,000 events a second, and a shadow is a sample, never a promise
    shadow_queue: int = 10_000
    canary_window: int = setting(
        "CANARY_WINDOW", 1000, "the last decisions per arm (live, canary) the automatic abort compares"
    )
    canary_min_events: int = setting(
        "CANARY_MIN_EVENTS", 200, "decisions each arm needs in its window before the automatic abort may judge"
    )
    canary_max_decline_delta: float = setting(
        "CANARY_MAX_DECLINE_DELTA",
        0.05,
        "largest allowed difference between the candidate's decline share and the live one's (absolute)",
    )
    canary_max_error_delta: float = setting(
        "CANARY_MAX_ERROR_DELTA",
        0.01,
        "largest allowed excess of the candidate's error rate over the live one's (absolute)",
    )

    def __post_init__(self) -> None:
        _check(1 <= self.shadow_queue <= 1_000_000, "RolloutPolicy.shadow_queue", "an integer within 1..1000000")
        _check(10 <= self.canary_window <= 1_000_000, "CANARY_WINDOW", "an integer within 10..1000000")
        _check(
            1 <= self.canary_min_events <= self.canary_window,
            "CANARY_MIN_EVENTS",
            "an integer within 1..CANARY_WINDOW",
        )
        _check(0 < self.canary_max_decline_delta <= 1, "CANARY_MAX_DECLINE_DELTA", "a share within (0, 1]")
        _check(0 < self.canary_max_error_delta <= 1, "CANARY_MAX_ERROR_DELTA", "a share within (0, 1]")


@dataclass(frozen=True)
class DriftPolicy:
    """Drift per model version (shared/fleet/drift.py), from the records the prediction log sees.

    Drift counts a share `sample` of the records (every k-th: at 10,000 decisions a second, a
    window of 2,000 counted records spans two seconds, not a fifth of one). A version's first
    `reference` counted records are its reference; the last `window` are compared with it as a
    population stability index over `bins` quantile bins of the reference, for the score and
    for each feature. Reason codes (`?explain=1`) name the
    `explain_top` features whose return to their defaults lowers the score most, computed
    within `explain_budget_ms` for review and decline answers only.
    """

    sample: float = setting(
        "DRIFT_SAMPLE", 0.1, "share of a version's decision records drift counts (every k-th: 0.1 is one in ten)"
    )
    reference: int = setting(
        "DRIFT_REFERENCE", 2000, "counted records of a version that form its reference distribution; `0` = no drift"
    )
    window: int = setting("DRIFT_WINDOW", 2000, "the last counted records of a version compared with its reference")
    bins: int = setting("DRIFT_BINS", 10, "quantile bins of the population stability index")
    # features named by reason codes, and the longest they may take for one answer (past it the answer has
    # none); fixed by design (tests vary them): shared/models/explain.py measured 22 µs for 25 features
    explain_top: int = 3
    explain_budget_ms: float = 5.0

    def __post_init__(self) -> None:
        _check(
            self.reference == 0 or 100 <= self.reference <= 1_000_000, "DRIFT_REFERENCE", "0, or within 100..1000000"
        )
        _check(100 <= self.window <= 1_000_000, "DRIFT_WINDOW", "an integer within 100..1000000")
        _check(2 <= self.bins <= 100, "DRIFT_BINS", "an integer within 2..100")
        _check(1 <= self.explain_top <= 50, "DriftPolicy.explain_top", "an integer within 1..50")
        _check(0 < self.explain_budget_ms <= 1000, "DriftPolicy.explain_budget_ms", "a number of ms within (0, 1000]")


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
        "MODEL_POLL_SECONDS", 5.0, "how often each replica checks its model source for new versions; `0` = never"
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
        "MAX_BODY_BYTES", 64 * 1024, "body cap of one event (a batch may carry 16 times that)"
    )
    max_batch_items: int = setting(
        "MAX_BATCH_ITEMS", 256, "events per `/api/score/batch` and per queued envelope, rows per V2 infer request"
    )
    max_message_bytes: int = setting(
        "MAX_MESSAGE_BYTES", 256 * 1024, "queue message cap: a larger body is rejected with an excerpt, never scored"
    )
    max_model_bytes: int = setting(
        "MAX_MODEL_BYTES", 256 * 1024 * 1024, "model file cap: a larger file is refused before it is read whole"
    )
    body_timeout_ms: int = setting(
        "BODY_TIMEOUT_MS",
        5000,
        "longest wait for a request body to arrive whole (past it the answer is 408), and under `make run` "
        "for a request's headers (past it the connection is closed)",
    )
    admission: AdmissionPolicy = field(default_factory=AdmissionPolicy)
    workers: int = setting(
        "WORKERS", 1, "processes `make run` serves with, each with its own warm sessions and L1 cache", local_only=True
    )
    models_keep_versions: int = setting("MODELS_KEEP_VERSIONS", 2, "versions kept loaded per model (newest is active)")
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
    )
    port: int = setting("PORT", 7071, "local port of `make run` (the Functions host owns it in Azure)", local_only=True)
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
        "TRACE_SAMPLE_RATIO", 0.01, "share of requests without a sampled parent that are traced (0..1)"
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
    )
    grpc_keys: str | None = setting(
        "GRPC_KEYS",
        None,
        "keys a gRPC call must carry in its `x-api-key` metadata, comma-separated (two during a rotation); "
        "unset: only a server on loopback takes calls without one (docs/security.md)",
        secret=True,
    )
    grpc_max_concurrent: int = setting(
        "GRPC_MAX_CONCURRENT", 64, "gRPC calls in progress at once; past it a call is refused (RESOURCE_EXHAUSTED)"
    )
    grpc_stream_max_in_flight: int = setting(
        "GRPC_STREAM_MAX_IN_FLIGHT",
        16,
        "events one `ScoreStream` call holds at once, scored or answered but not yet sent; past it the stream "
        "is not read (HTTP/2 flow control holds the sender) until answers leave",
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
    )

    def __post_init__(self) -> None:
        _check(self.max_body_bytes >= 1024, "MAX_BODY_BYTES", f"an integer >= 1024, got {self.max_body_bytes}")
        _check(self.max_batch_items >= 1, "MAX_BATCH_ITEMS", f"an integer >= 1, got {self.max_batch_items}")
        _check(self.max_message_bytes >= 1024, "MAX_MESSAGE_BYTES", f"an integer >= 1024, got {self.max_message_bytes}")
        _check(self.max_model_bytes >= 1024, "MAX_MODEL_BYTES", f"an integer >= 1024, got {self.max_model_bytes}")
        _check(100 <= self.body_timeout_ms <= 600_000, "BODY_TIMEOUT_MS", "an integer within 100..600000")
        _check(
            self.max_batch_items <= self.batch.max_queue,
            "MAX_BATCH_ITEMS",
            f"an integer <= {self.batch.max_queue}, a model version's queue: a V2 request's rows queue together",
        )
        _check(1 <= self.workers <= 64, "WORKERS", "an integer within 1..64")
        _check(self.gc_gen0_threshold >= 0, "GC_GEN0_THRESHOLD", "an integer >= 0 (0 keeps Python's default)")
        _check(self.models_keep_versions >= 1, "MODELS_KEEP_VERSIONS", "an integer >= 1")
        _check(1 <= self.port <= 65535, "PORT", "a TCP port within 1..65535")
        _check(
            not (self.grpc_port and self.workers > 1), "WORKERS", "1 when GRPC_PORT is set (one process binds the port)"
        )
        _check(0 <= self.grpc_port <= 65535, "GRPC_PORT", "a TCP port within 1..65535, or 0 for no gRPC server")
        _check(1 <= self.grpc_max_concurrent <= 100_000, "GRPC_MAX_CONCURRENT", "an integer within 1..100000")
        _check(1 <= self.grpc_stream_max_in_flight <= 4096, "GRPC_STREAM_MAX_IN_FLIGHT", "an integer within 1..4096")
        if self.grpc_keys is not None:
            keys = self.grpc_keys.split(",")
            _check(
                all(16 <= len(k.strip()) <= 256 and k.strip().isascii() for k in keys) and len(keys) <= 4,
                "GRPC_KEYS",
                "1..4 comma-separated ASCII keys of 16..256 characters each",
            )
        _check(
            self.log_level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), "LOG_LEVEL", "DEBUG|INFO|WARNING|ERROR"
        )
        if self.redis_url is not None:
            _check(_is_redis_url(self.redis_url), "REDIS_URL", "a redis://, rediss:// or unix:// URL with a host")
        _check(bool(self.default_model), "DEFAULT_MODEL", "a model name")
        _check(self.feature_store in ("native", "feast"), "FEATURE_STORE", "one of native|feast")
        if self.feature_store == "feast":
            _check(bool(self.feast_project), "FEAST_PROJECT", "the Feast project name (FEATURE_STORE=feast)")
            _check(bool(self.feast_redis_url or self.redis_url), "FEAST_REDIS_URL", "a Redis URL, or REDIS_URL set")
        if self.prediction_log.sink == "blob":
            _check(
                self.uses_blob_models, "PREDICTION_LOG", "dir or off unless ModelStorage (or its blobServiceUri) is set"
            )
        if self.feast_redis_url is not None:
            _check(_is_redis_url(self.feast_redis_url), "FEAST_REDIS_URL", "a redis://, rediss:// or unix:// URL")
        _check(0 <= self.model_poll_s <= 3600, "MODEL_POLL_SECONDS", "a number of seconds within 0..3600")
        _check(
            not (self.auto_promote and self.model_storage_blob_uri),
            "AUTO_PROMOTE",
            "unset or false with ModelStorage__blobServiceUri (Azure): there only the control plane promotes",
        )
        _check(0 <= self.trace_sample_ratio <= 1, "TRACE_SAMPLE_RATIO", "a number within 0..1")
        _check(self.result_ttl_s >= 600, "RESULT_TTL_S", "a number >= 600 (the duplicate-detection window, 10 min)")
        _check(
            self.event_max_age_s == 0 or 0 < self.event_max_age_s <= self.result_ttl_s - CLOCK_SKEW_S,
            "EVENT_MAX_AGE_S",
            f"0 (off) or seconds within (0, RESULT_TTL_S - {CLOCK_SKEW_S:.0f}]: a result must outlive its window",
        )
        _check(
            6_000 <= self.queue_batch_budget_ms <= 270_000,
            "QUEUE_BATCH_BUDGET_MS",
            "an integer within 6000..270000 (a Service Bus lock lasts 5 minutes at most)",
        )
        _check(
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
        settings: Settings = _build(cls, env)
        if environ is None:  # NOTE: the process's own: a typo there is a setting silently ignored
            for line in unknown_settings(env):
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


def _build(cls: type[Any], env: Mapping[str, str]) -> Any:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        doc: SettingDoc | None = f.metadata.get("setting")
        if doc is None:
            if dataclasses.is_dataclass(hints[f.name]):  # a nested policy object; else a field fixed by design
                values[f.name] = _build(hints[f.name], env)
            continue
        raw = env.get(doc.env, "")
        if raw != "":
            values[f.name] = _parser(hints[f.name])(raw, doc)
        elif doc.env in env and type(None) in typing.get_args(hints[f.name]):
            values[f.name] = None  # set but empty turns an optional setting off
    try:
        return cls(**values)
    except SettingsError:
        raise
    except (TypeError, ValueError) as exc:  # pragma: no cover - a declaration mistake, not a user's
        raise SettingsError(f"{cls.__name__}: {exc}") from None


def _parser(hint: Any) -> Callable[[str, SettingDoc], Any]:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is Literal:
        return lambda raw, doc: _choice(raw, doc, tuple(typing.get_args(hint)))
    if args and typing.get_origin(hint) is not Literal:  # Optional[X]
        return _parser(args[0])
    return {bool: _bool, int: _int, float: _float}.get(hint, _str)


def _shown(raw: str, doc: SettingDoc) -> str:
    return "" if doc.secret else f", got {raw!r}"


def _bool(raw: str, doc: SettingDoc) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise _fail(doc.env, f"true or false{_shown(raw, doc)}")


def _int(raw: str, doc: SettingDoc) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise _fail(doc.env, f"an integer{_shown(raw, doc)}") from None


def _float(raw: str, doc: SettingDoc) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise _fail(doc.env, f"a number{_shown(raw, doc)}") from None


def _str(raw: str, doc: SettingDoc) -> str:
    return raw.strip().upper() if doc.env == "LOG_LEVEL" else raw


def _choice(raw: str, doc: SettingDoc, choices: tuple[str, ...]) -> str:
    value = raw.strip().lower()
    if value not in choices:
        raise _fail(doc.env, f"one of {'|'.join(choices)}{_shown(raw, doc)}")
    return value


def declared(cls: type[Any] = Settings) -> Iterator[tuple[SettingDoc, str, Any]]:
    """Every declared setting: its doc, its type as written, and its default (nested objects walked)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        doc: SettingDoc | None = f.metadata.get("setting")
        if doc is None:
            if dataclasses.is_dataclass(hints[f.name]):
                yield from declared(hints[f.name])
        else:
            yield doc, _type_name(hints[f.name]), f.default


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " / ".join(typing.get_args(hint))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return str(args[0].__name__ if args else hint.__name__)


def _default_text(doc: SettingDoc, default: Any) -> str:
    if doc.shown_default is not None:
        return doc.shown_default
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f'`"{default}"`' if default == "" else f"`{default}`"


def markdown_table() -> str:
    """The README's settings table, derived from the declarations."""
    lines = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for doc, type_name, default in declared():
        where = " (local only)" if doc.local_only else ""
        lines.append(f"| `{doc.env}` | {type_name} | {_default_text(doc, default)} | {doc.doc}{where} |")
    return "\n".join(lines)


# Derived from the declarations: the infra checks assert each APP_SETTING_NAMES entry is set on
# the Container App; the local-only ones are a connection string (Azure uses the identity-based
# ModelStorage__blobServiceUri) and the port (the Functions host owns it in Azure).
APP_SETTING_NAMES: tuple[str, ...] = tuple(doc.env for doc, _, _ in declared() if not doc.local_only)
LOCAL_SETTING_NAMES: tuple[str, ...] = tuple(doc.env for doc, _, _ in declared() if doc.local_only)


# First words of our names that other software's variables share (AZURE_CLIENT_ID, GRPC_TRACE): no
# typo is guessed from them alone.
_SHARED_WORDS = frozenset({"AZURE", "APPLICATIONINSIGHTS", "GRPC"})  # GRPC_: gRPC core's own (GRPC_VERBOSITY)


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """A line for each variable of `environ` that looks like one of our settings but is none: a
    first word two or more of ours share (`BATCH_`, `REDIS_`, ...), or within two edits of one of
    our names (case aside). Each names the variable, its value (not a secret's) and the nearest name."""
    docs = {doc.env: doc for doc, _, _ in declared()}
    words = {n.split("_")[0] for n in docs if sum(m.split("_")[0] == n.split("_")[0] for m in docs) > 1}
    lines = []
    for name in sorted(set(environ) - set(docs)):
        upper, word = name.upper(), name.split("_")[0]
        # NOTE: cheap first: a name two edits away has a length within two, and (we assume) its first 3 letters
        near = [k for k in docs if k[:3].upper() == upper[:3] and abs(len(k) - len(name)) <= 2 and len(name) >= 5]
        close = [k for k in near if _edits(upper, k.upper()) <= 2]
        if not close and word not in words - _SHARED_WORDS:
            continue
        family = close or [k for k in docs if k.split("_")[0] == word]
        nearest = min(family, key=lambda known: _edits(upper, known.upper()))
        value = "" if docs[nearest].secret else f"={environ[name][:40]!r}"
        lines.append(
            f"unknown setting {name}{value} is ignored: did you mean {nearest}? "
            "(every setting: docs/settings.md; `python -m shared.settings` lists them)"
        )
    return lines


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions from `a` to `b`."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
