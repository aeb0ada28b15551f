"""The tunables each owner is handed: small value objects that validate themselves.

    BatchPolicy          micro-batching (shared/runtime/batching)
    CachePolicy          the prediction and feature caches (shared/stores/cache, shared/features)
    OrtOptions           ONNX Runtime sessions (shared/models/onnx.py)
    AdmissionPolicy      how much work a process takes at once (shared/runtime/admission.py)
    ReviewPolicy         the LLM review of the uncertain tail (shared/review)
    PredictionLogPolicy  the record of every decision (shared/stores/prediction_log)
    RolloutPolicy        shadow scoring and the canary (shared/fleet)
    DriftPolicy          drift and reason codes (shared/fleet/drift.py, shared/models/explain.py)

Each field is a setting declared once with its env name, doc and bounds (shared/setting.py), or a
value fixed by design (bounded all the same); `__post_init__` checks them (`checked`) and adds the
rules that tie two together. shared/settings.py's `Settings` holds one of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from shared.setting import checked, fail, fixed, setting

__all__ = [
    "AdmissionPolicy",
    "BatchPolicy",
    "CachePolicy",
    "DriftPolicy",
    "OrtOptions",
    "PredictionL2",
    "PredictionLogPolicy",
    "ReviewPolicy",
    "RolloutPolicy",
]

GraphOptimization = Literal["disable", "basic", "extended", "all"]
PredictionL2 = Literal["auto", "always", "never"]
PredictionSink = Literal["off", "dir", "blob"]


def check(ok: bool, env: str, expected: str) -> None:
    """A rule that ties settings together (a bound of one alone is declared with it)."""
    if not ok:
        raise fail(env, expected)


@dataclass(frozen=True)
class BatchPolicy:
    """How requests are grouped before the model runs.

    `window_ms`: the longest a request waits for company once a batch is open.
    `max_size`: a full batch runs at once. A lone request on an idle model never waits.
    """

    window_ms: float = setting(
        "BATCH_WINDOW_MS", 5.0, "longest wait for a batch to fill once one is running", ge=0, le=1000
    )
    max_size: int = setting("BATCH_MAX_SIZE", 8, "rows per model run", ge=1, le=1024)
    # rows waiting for one model version at most, past it a fast 503 `overloaded`; fixed by design: a backstop
    # behind admission (MAX_INFLIGHT, MAX_QUEUED: what an operator tunes), four V2 requests of MAX_BATCH_ITEMS rows
    max_queue: int = 1024

    def __post_init__(self) -> None:
        checked(self)
        check(self.max_queue >= self.max_size, "BatchPolicy.max_queue", f"rows >= BATCH_MAX_SIZE, got {self.max_queue}")

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

    l1_size: int = setting("CACHE_L1_SIZE", 50_000, "predictions kept in the in-process LRU (0 disables that L1)", ge=0)
    l1_ttl_s: float = setting("CACHE_L1_TTL_S", 30.0, "prediction lifetime in the in-process LRU, seconds", gt=0)
    l2_ttl_s: float = setting(
        "CACHE_L2_TTL_S",
        3600.0,
        "prediction lifetime in Redis, seconds; > 0: under volatile-lru only keys with a TTL are evicted, never features",
        gt=0,
        why="a prediction must be evictable",
    )
    features_l1_size: int = setting(
        "FEATURES_L1_SIZE", 100_000, "users whose features a replica keeps in process (0 reads Redis every time)", ge=0
    )
    features_l1_ttl_s: float = setting(
        "FEATURES_L1_TTL_S", 5.0, "how long a replica reuses a user's features before re-reading Redis", gt=0
    )
    redis_timeout_ms: float = setting(
        "REDIS_TIMEOUT_MS", 50.0, "deadline of one Redis round-trip; past it the read is a miss", gt=0
    )
    prediction_l2: PredictionL2 = setting(
        "PREDICTION_L2",
        "auto",
        "predictions through Redis: `auto` only while a round-trip costs less than the model run it saves",
    )

    def __post_init__(self) -> None:
        checked(self)


@dataclass(frozen=True)
class OrtOptions:
    """ONNX Runtime session options."""

    intra_op_threads: int = setting(
        "ORT_INTRA_OP_THREADS",
        1,
        "ONNX Runtime intra-op threads (0 = ORT decides)",
        ge=0,
        why="0 lets ONNX Runtime choose",
    )
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
        ge=1,
        noun="a number of milliseconds",
    )
    arena_max_mb: int = setting(
        "ORT_ARENA_MAX_MB",
        64,
        "the CPU memory all model runs of a process may hold together (one capped arena); past it a run fails",
        ge=16,
        why="MiB",
    )

    def __post_init__(self) -> None:
        checked(self)


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
        ge=0,
        why="0: no cap",
    )
    max_queued: int = setting(
        "MAX_QUEUED",
        64,
        "requests waiting for a slot at most; past it a fast 503 `overloaded` with Retry-After (docs/reliability.md: why 64)",
        ge=0,
    )
    max_queue_wait_ms: float = setting(
        "MAX_QUEUE_WAIT_MS",
        20.0,
        "longest a request waits for a slot; past it a 503 `overloaded` (a part of the p99 budget of 50 ms)",
        gt=0,
        le=10_000,
        noun="a number of ms",
    )
    queue_target_ms: float = setting(
        "QUEUE_TARGET_MS",
        5.0,
        "longest wait while the wait queue stands (waits past it for 100 ms of hand-overs: overload, not a burst)",
        gt=0,
        noun="a number of ms",
    )
    request_timeout_ms: int = setting(
        "REQUEST_TIMEOUT_MS",
        2000,
        "longest a scoring request may work once admitted; past it the work is dropped, the answer a 503",
        ge=50,
        le=600_000,
    )

    def __post_init__(self) -> None:
        checked(self)
        check(self.queue_target_ms <= self.max_queue_wait_ms, "QUEUE_TARGET_MS", "a number of ms <= MAX_QUEUE_WAIT_MS")


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
        "LLM_TIMEOUT_MS",
        150.0,
        "longest an HTTP request waits for its review; then it answers locally, review pending",
        ge=0,
        le=600_000,
        noun="milliseconds",
    )
    queue_timeout_ms: float = setting(
        "LLM_QUEUE_TIMEOUT_MS",
        5000.0,
        "longest the queue path waits for a review before it publishes",
        ge=0,
        le=600_000,
        noun="milliseconds",
    )
    call_timeout_ms: float = setting(
        "LLM_CALL_TIMEOUT_MS",
        10_000.0,
        "longest one call to Azure OpenAI may take, in the background too",
        ge=0,
        le=600_000,
        noun="milliseconds",
    )
    max_rps: float = setting("LLM_MAX_RPS", 20.0, "reviews started per second, per replica (token bucket)", gt=0)
    max_share: float = setting(
        "LLM_MAX_SHARE", 0.25, "largest share of scored events reviewed, per replica", gt=0, le=1, noun="a share"
    )
    # fixed by design (tests shorten them): 5 failures in a row (timeouts, 429, 5xx, bad answers) open the
    # breaker for 30 s, then one probe decides; LLM_MAX_RPS and LLM_MAX_SHARE are the budget an operator sets
    breaker_failures: int = fixed(5, ge=1)
    breaker_reset_s: float = fixed(30.0, gt=0, noun="a number of seconds")
    result_ttl_s: float = setting(
        "REVIEW_TTL_S",
        86_400.0,
        "how long a review stays readable at `/api/reviews/{event_id}` (and cached)",
        ge=60,
        noun="a number of seconds",
    )

    def __post_init__(self) -> None:
        check(0.0 <= self.band_low <= self.band_high <= 1.0, "LLM_BAND_LOW", "0 <= LLM_BAND_LOW <= LLM_BAND_HIGH <= 1")
        checked(self)
        if self.endpoint is not None:
            scheme = urlsplit(self.endpoint).scheme
            check(scheme in ("https", "http"), "AZURE_OPENAI_ENDPOINT", "an https:// URL")
            check(bool(self.deployment), "AZURE_OPENAI_DEPLOYMENT", "a deployment name")

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
    sample: float = setting(
        "PREDICTION_LOG_SAMPLE", 1.0, "share of decisions recorded (0..1; 1 = every one)", ge=0, le=1, noun="a share"
    )
    # records held for the writer (past it new ones are dropped, counted) and how often it sends them; fixed
    # by design (tests shorten them): 5 s of 10,000 decisions a second; docs/benchmark.md measured 1 s vs 0.25 s
    buffer: int = fixed(50_000, ge=100, le=10_000_000)
    flush_s: float = fixed(1.0, ge=0.05, le=300, noun="a number of seconds")
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
        checked(self)
        check(bool(self.container), "PREDICTION_LOG_CONTAINER", "a blob container name")
        if self.hash_key is not None:
            check(len(self.hash_key.encode()) <= 64, "PREDICTION_LOG_HASH_KEY", "at most 64 bytes")

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
    shadow_queue: int = fixed(10_000, ge=1, le=1_000_000)
    canary_window: int = setting(
        "CANARY_WINDOW",
        1000,
        "the last decisions per arm (live, canary) the automatic abort compares",
        ge=10,
        le=1_000_000,
    )
    canary_min_events: int = setting(
        "CANARY_MIN_EVENTS", 200, "decisions each arm needs in its window before the automatic abort may judge", ge=1
    )
    canary_max_decline_delta: float = setting(
        "CANARY_MAX_DECLINE_DELTA",
        0.05,
        "largest allowed difference between the candidate's decline share and the live one's (absolute)",
        gt=0,
        le=1,
        noun="a share",
    )
    canary_max_error_delta: float = setting(
        "CANARY_MAX_ERROR_DELTA",
        0.01,
        "largest allowed excess of the candidate's error rate over the live one's (absolute)",
        gt=0,
        le=1,
        noun="a share",
    )

    def __post_init__(self) -> None:
        checked(self)
        check(self.canary_min_events <= self.canary_window, "CANARY_MIN_EVENTS", "an integer <= CANARY_WINDOW")


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
        "DRIFT_REFERENCE",
        2000,
        "counted records of a version that form its reference distribution; `0` = no drift",
        ge=100,
        le=1_000_000,
        off="no drift",
    )
    window: int = setting(
        "DRIFT_WINDOW", 2000, "the last counted records of a version compared with its reference", ge=100, le=1_000_000
    )
    bins: int = setting("DRIFT_BINS", 10, "quantile bins of the population stability index", ge=2, le=100)
    # features named by reason codes, and the longest they may take for one answer (past it the answer has
    # none); fixed by design (tests vary them): shared/models/explain.py measured 22 µs for 25 features
    explain_top: int = fixed(3, ge=1, le=50)
    explain_budget_ms: float = fixed(5.0, gt=0, le=1000, noun="a number of ms")

    def __post_init__(self) -> None:
        checked(self)
