"""Every answer the service gives, as a type defined once: the wire and its schema come from it.

    Scored, Review                  one scored event (POST /api/score, /api/models/{name}/score)
    Batch, IndexedError             POST /api/score/batch: an answer or an error per item, in order
    ErrorBody                       every /api error: {"error": code, "detail": message}
    Readiness, Liveness             GET /api/health/ready, /api/health/live
    ModelList, ModelView, LoadedVersion, LoadError, EnsembleView, EnsembleBuild
                                    GET /api/models, POST|DELETE /api/models/{name}/activate
    ReviewRecord                    GET /api/reviews/{event_id} (and the record kept in Redis)
    RolloutView and its blocks      GET /api/models/{name}/rollout, the shadow and canary calls
    Stats and its blocks            GET /api/stats (the cache and tier counters are these structs)
    V2*                             the Open Inference Protocol's answers (/v2/...)
    QueueResult, Rejection          what the Service Bus path publishes per payment

The HTTP bodies, the V2 metadata and the queue records are `encode(answer)`; the OpenAPI
document derives its response schemas from these types (shared/adapters/http/openapi.py). Byte for byte,
an answer is what the dicts built before it were: fields in the same order; a field that is
sometimes absent is `UNSET` then (e.g. `Scored.scores`, given only with more than one
opinion), or left out at its default (`omit_defaults`: `Readiness.detail` when empty); numbers
rounded as they are built. (msgspec writes floats as orjson does, but for |x| >= 1e16: `1e16`
where orjson wrote `1e+16`; no answer holds one.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from shared.errors import ScoringError

__all__ = [
    "REF",
    "AbortView",
    "AdmissionStats",
    "Answer",
    "ArmView",
    "Batch",
    "BinaryData",
    "BreakerState",
    "CacheStats",
    "CanaryView",
    "ControlAction",
    "Counters",
    "Decision",
    "DriftView",
    "EnsembleBuild",
    "EnsembleView",
    "ErrorBody",
    "EventStats",
    "IndexedError",
    "Liveness",
    "LoadError",
    "LoadedVersion",
    "Method",
    "ModelList",
    "ModelView",
    "OutcomeReceipt",
    "Platform",
    "PredictionLogStats",
    "QueueResult",
    "Readiness",
    "Reason",
    "ReasonCode",
    "Rejection",
    "Review",
    "ReviewCounts",
    "ReviewRecord",
    "ReviewStats",
    "ReviewStatus",
    "RolloutView",
    "Scored",
    "ShadowView",
    "Source",
    "Stats",
    "ThresholdsView",
    "TierStats",
    "V2Error",
    "V2InferHead",
    "V2Live",
    "V2ModelMetadata",
    "V2ModelReady",
    "V2Output",
    "V2Parameters",
    "V2Ready",
    "V2ServerMetadata",
    "V2Tensor",
    "encode",
    "error_body",
    "one_of",
]

Decision = Literal["approve", "review", "decline"]
ReviewStatus = Literal["done", "pending", "failed", "skipped"]
Source = Literal["model", "cache", "llm"]
Method = Literal["weighted_average", "voting", "stacking"]
BreakerState = Literal["closed", "open", "half_open"]
Platform = Literal["onnx_onnxv1", "ensemble"]
Score = Annotated[float, Meta(ge=0, le=1)]
REF = "#/components/schemas/{name}"  # where shared/adapters/http/openapi.py puts each type's schema

encode = msgspec.json.encode  # one encoder for every answer, bound once (the hot path calls it)


def one_of(*types: type[Struct], anyof: bool = False) -> Meta:
    """The schema of an item that is one of several untagged structs (msgspec refuses the bare
    union: it could not decode one; encoding needs no tag, and the wire has none)."""
    refs = [{"$ref": REF.format(name=t.__name__)} for t in types]
    return Meta(extra_json_schema={"anyOf" if anyof else "oneOf": refs})


class Answer(Struct, forbid_unknown_fields=True, frozen=True):
    """An answer: a closed object (its schema admits no other key), fixed once built.

    NOTE: each subclass says `frozen=True` again: mypy does not see a struct's inherited config.
    """


class Counters(Struct, forbid_unknown_fields=True):
    """Counters that their owner bumps in place (a struct's attribute is as cheap as a slot's)."""


# -- scoring ------------------------------------------------------------------------------


class Review(Answer, frozen=True, omit_defaults=True):
    """What became of a second opinion: `done` (it decided), `pending` (still running: read
    it later by `id`), `failed` or `skipped` (the local decision stands; `reason` says why)."""

    status: ReviewStatus
    id: Annotated[str, Meta(description="the event id: GET /api/reviews/{id} reads the kept record")]
    reason: str = ""
    risk_score: Annotated[float | UnsetType, Meta(description="the reviewer's score, rounded to 6 places")] = UNSET
    rationale: str = ""


# NOTE: gc=False: built once per event, and it holds only strings, numbers, their lists and dicts
# and a Review, none of which can refer back to it, so it is in no cycle for the collector to find.
DefaultedWhy = Literal["missing", "null", "stale", "invalid"]
"""missing: no value for the entity · null: the store holds an empty value · stale: older than its view's
max age · invalid: not a finite number a float32 holds (shared/features/mapping.py)"""


class ReasonCode(Answer, frozen=True):
    """One feature behind a score: what it was, its model default, and how much the score drops
    when the feature alone goes back to its default (occlusion; shared/models/explain.py)."""

    feature: str
    value: float
    default: float
    contribution: Annotated[float, Meta(description="score minus the score with this feature on its default")]


class Reason(Answer, frozen=True):
    """One feature behind a score, as a caller sees it: its name and which way it moved the score.
    Never its value (another user's chargebacks or spend); the values are in the prediction log."""

    feature: str
    effect: Literal["raises"]

    @classmethod
    def of(cls, code: ReasonCode) -> Reason:
        return cls(code.feature, "raises")  # only codes whose feature raised the score are chosen


class Scored(Answer, frozen=True, gc=False):
    """The answer for one event."""

    event_id: str
    risk_score: Annotated[float, Meta(ge=0, le=1, description="rounded to 6 places")]
    decision: Decision
    reason: str
    model: str
    model_version: str
    source: Annotated[Source, Meta(description="model (run now), cache (a known row), llm (the reviewer decided)")]
    timings_ms: Annotated[dict[str, float], Meta(description="ms per stage, rounded to 3 places")]
    defaulted: Annotated[
        list[str] | UnsetType,
        Meta(description="with ANSWER_DEFAULTED on: user features on their model default (else never given)"),
    ] = UNSET
    defaulted_why: Annotated[
        dict[str, DefaultedWhy] | UnsetType,
        Meta(description="with ANSWER_DEFAULTED on: why each defaulted feature took its default, when any did"),
    ] = UNSET
    scores: Annotated[
        dict[str, float] | UnsetType, Meta(description="every opinion by source, when more than one (rounded to 6)")
    ] = UNSET
    review: Review | UnsetType = UNSET
    reasons: Annotated[
        list[Reason] | UnsetType,
        Meta(description="with ?explain=1, for review and decline: the features that raised the score most"),
    ] = UNSET


class ErrorBody(Answer, frozen=True):
    """Every /api error: a stable code and a message for people."""

    error: Annotated[str, Meta(description="a stable code (shared/errors.py)")]
    detail: str


def error_body(exc: ScoringError) -> ErrorBody:
    """The body every adapter answers an error with."""
    return ErrorBody(error=exc.code, detail=exc.detail)


class IndexedError(Answer, frozen=True):
    """A batch item that did not score: its slot, and the error it alone got."""

    index: int
    error: str
    detail: str


class Batch(Answer, frozen=True):
    """One answer per event of a batch, in order."""

    results: Sequence[Annotated[object, one_of(Scored, IndexedError)]]


class OutcomeReceipt(Answer, frozen=True):
    """What became of each outcome of a batch (`POST /api/outcomes`): written + duplicates + refused
    == the batch's size; each refused one in `errors`, with its slot and code."""

    written: int
    duplicates: int
    refused: int
    errors: Sequence[IndexedError]


# -- health ---------------------------------------------------------------------------------


class Liveness(Answer, frozen=True):
    status: Literal["live"]


class Readiness(Answer, frozen=True, kw_only=True, omit_defaults=True):
    """Whether the core can serve, why not, and what it serves with less than it should."""

    status: Literal["ready", "not_ready"]
    detail: Annotated[str, Meta(description="why not ready")] = ""
    models: list[str]
    degraded: Annotated[list[str], Meta(description="what serves with less than it should, by component")] = []

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def lists(self, component: str) -> bool:
        """Whether `degraded` names `component` (each reason starts with its component: `redis: ...`)."""
        return any(reason.startswith(f"{component}:") for reason in self.degraded)

    @classmethod
    def serving(cls, models: list[str], degraded: list[str]) -> Readiness:
        return cls(status="ready", models=models, degraded=degraded)

    @classmethod
    def refused(cls, detail: str, models: list[str]) -> Readiness:
        return cls(status="not_ready", detail=detail, models=models)


# -- models ---------------------------------------------------------------------------------


class ThresholdsView(Answer, frozen=True):
    review: float
    decline: float


class LoadedVersion(Answer, frozen=True):
    """One loaded version of a model, and its counters."""

    version: str
    fingerprint: str
    sha256: Annotated[str, Meta(description="the file's SHA-256: what its release record and the fleet's records name")]
    providers: list[str]
    loaded_at: Annotated[float, Meta(description="epoch seconds")]
    load_ms: float
    features: list[str]
    thresholds: ThresholdsView
    batches: int
    requests: int
    shed: int
    rows_run: int
    batch_run_ms: Annotated[float | None, Meta(description="moving average of a model run")]
    predictions_via_redis: bool


class LoadError(Answer, frozen=True):
    """The last version of a model that was rejected, why, when, and which file (its stamp)."""

    version: str
    reason: str
    at: Annotated[float, Meta(description="epoch seconds")]
    stamp: str


class ModelView(Answer, frozen=True):
    """A model as it serves now: its versions, pin and last rejected version."""

    name: str
    active_version: str
    versions: list[str]
    providers: list[str]
    loaded_at: float
    pinned: str | None
    last_error: LoadError | None
    loaded: list[LoadedVersion]


class EnsembleBuild(Answer, frozen=True, kw_only=True, omit_defaults=True):
    """An active ensemble: its members at fixed versions and how their scores combine."""

    version: str
    method: Method
    members: Annotated[list[str], Meta(description="name/version of each member")]
    weights: list[float] = []
    thresholds: list[float] = []
    meta_model: str = ""
    features: list[str]
    decision: ThresholdsView


class EnsembleView(Answer, frozen=True):
    name: str
    ensemble: EnsembleBuild | None
    last_error: str | None


class ModelList(Answer, frozen=True):
    models: Sequence[Annotated[object, one_of(ModelView, EnsembleView, anyof=True)]]


# -- stats ---------------------------------------------------------------------------------
# the cache, tier and review counters are the live objects their owners count into;
# /api/stats encodes them as they stand.


class CacheStats(Counters):
    l1_hits: int = 0
    l2_hits: int = 0
    misses: int = 0


class FeatureViewStats(Answer, frozen=True):
    """A Feast feature view's lookups, and how many of them took the model's default, by why."""

    lookups: int
    missing: int
    null: int
    stale: int


class FeatureStats(Answer, frozen=True):
    """The feature store's counters; the Feast store adds its round trips, errors and views."""

    l1_hits: int = 0
    l2_hits: int = 0
    misses: int = 0
    round_trips: int | UnsetType = UNSET
    errors: int | UnsetType = UNSET
    views: dict[str, FeatureViewStats] | UnsetType = UNSET


class TierStats(Counters):
    reads: int = 0
    round_trips: int = 0
    writes: int = 0
    errors: int = 0
    skipped: int = 0
    refused: Annotated[int, Meta(description="writes the server answered with an error (e.g. OOM)")] = 0
    rtt_ms: Annotated[float, Meta(description="moving average of a successful read round-trip")] = 0.0


class ReviewStats(Counters):
    asked: Annotated[int, Meta(description="events that went for review")] = 0
    called: Annotated[int, Meta(description="calls made to Azure OpenAI")] = 0
    done: int = 0
    cached: Annotated[int, Meta(description="answers from the review cache")] = 0
    pending: Annotated[int, Meta(description="answered locally first; the review ended later")] = 0
    failed: int = 0
    skipped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ReviewCounts(ReviewStats, kw_only=True):
    """The reviews' counters and their breaker."""

    breaker: BreakerState
    breaker_opened: Annotated[int, Meta(description="times it opened")]


class EventStats(Answer, frozen=True):
    scored: int
    defaulted: int
    defaulted_share: float
    recent_defaulted_share: float


class AdmissionStats(Answer, frozen=True):
    max_inflight: int
    inflight: int
    max_queued: int
    waiting: int
    max_queue_wait_ms: float
    queue_target_ms: float
    admitted: int
    waited: int
    shed: int
    timed_out: int
    request_timeout_ms: int


class PredictionLogStats(Counters):
    """The prediction log's writer on this replica (PREDICTION_LOG)."""

    sink: str = ""
    buffered: Annotated[int, Meta(description="records held in memory now")] = 0
    recorded: Annotated[int, Meta(description="decisions taken into the buffer (after sampling)")] = 0
    written: int = 0
    dropped_full: Annotated[int, Meta(description="dropped: the buffer was full")] = 0
    dropped_sink: Annotated[int, Meta(description="dropped: the sink failed past its retries")] = 0
    dropped_shutdown: Annotated[int, Meta(description="dropped: not sent within the 5 s shutdown bound")] = 0
    flushes: int = 0
    failures: Annotated[int, Meta(description="writes the sink refused (each retried)")] = 0


class Stats(Answer, frozen=True):
    """The counters of this replica."""

    events: EventStats
    predictions: CacheStats
    features: FeatureStats
    feature_source: str
    redis: TierStats | None
    reviews: ReviewCounts | None
    admission: AdmissionStats
    prediction_log: PredictionLogStats | UnsetType = UNSET
    readiness: Annotated[
        Readiness | UnsetType, Meta(description="readiness with its reasons (the anonymous probe says ready or not)")
    ] = UNSET


class ReviewRecord(Answer, frozen=True, omit_defaults=True):
    """The kept review of an event: its outcome and, but for one cut short at shutdown, the
    decision it gave, every score and the prompt's version."""

    event_id: str
    status: ReviewStatus
    id: str
    reason: str = ""
    risk_score: float | UnsetType = UNSET
    rationale: str = ""
    decision: Decision | UnsetType = UNSET
    scores: dict[str, float] | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    direction: Annotated[
        str,
        Meta(description="what the review did to the local decision: escalated, confirmed, lowered, refused"),
    ] = ""


# -- rollouts: shadow, canary, drift (GET /api/models/{name}/rollout) -------------------------


class ShadowView(Answer, frozen=True):
    """A model's shadow version and how it compares with the live one on this replica."""

    version: str
    scored: int
    agreed: Annotated[int, Meta(description="events with the same decision as the live version's")]
    agreement: Annotated[float | None, Meta(description="agreed / scored")]
    mean_abs_difference: Annotated[float | None, Meta(description="mean |shadow score - live score|")]
    dropped: Annotated[int, Meta(description="events not shadow-scored: the queue was full")]
    failed: int


class ArmView(Answer, frozen=True):
    """One arm of a canary split in the automatic abort's window on this replica."""

    version: str
    events: int
    declines: int
    errors: int
    decline_share: float | None
    error_rate: float | None


class CanaryView(Answer, frozen=True):
    """A traffic split by user: `weight` of users (by a hash of user_id) are scored by `version`."""

    version: str
    weight: Annotated[float, Meta(ge=0, le=1)]
    set_at: Annotated[float, Meta(description="epoch seconds")]
    live: ArmView
    canary: ArmView


class AbortView(Answer, frozen=True):
    """The last canary of a model that was aborted: by the API or by the automatic abort."""

    version: str
    reason: str
    at: Annotated[float, Meta(description="epoch seconds")]


class ControlAction(Answer, frozen=True):
    """One control action (a pin, a release, a shadow, a canary, an abort, a promotion): who, what, when, why."""

    at: Annotated[float, Meta(description="epoch seconds")]
    who: Annotated[str, Meta(description="the principal, or the kind of key, that made the call")]
    action: Literal["pin", "unpin", "shadow", "unshadow", "canary", "abort", "promote"]
    model: str
    version: str | None = None
    weight: float | None = None
    reason: str = ""


class DriftView(Answer, frozen=True):
    """A version's recent records against its reference, per feature and for the score."""

    version: str
    reference_events: Annotated[int, Meta(description="records in the reference (full at DRIFT_REFERENCE)")]
    window_events: int
    psi: Annotated[dict[str, float], Meta(description="population stability index by feature; `score` too")]
    defaulted: Annotated[dict[str, float], Meta(description="share of the window on the model default, by feature")]
    reference: Annotated[
        str,
        Meta(description="where the reference is from: `fleet` (the control store's), `local`, or `local: <why>`"),
    ]


class RolloutView(Answer, frozen=True):
    """GET /api/models/{name}/rollout: what serves a model, what shadows it, the split, the drift."""

    name: str
    live_version: str
    pinned: str | None
    shadow: ShadowView | None
    canary: CanaryView | None
    last_abort: AbortView | None
    drift: list[DriftView]
    actions: Annotated[list[ControlAction], Meta(description="the last control actions on the model, newest first")] = (
        msgspec.field(default_factory=list)
    )


# -- V2 (Open Inference Protocol) -------------------------------------------------------------


class V2ServerMetadata(Answer, frozen=True):
    name: str
    version: str
    extensions: list[str]


class V2Live(Answer, frozen=True):
    live: bool


class V2Ready(Answer, frozen=True):
    ready: bool


class V2ModelReady(Answer, frozen=True):
    name: str
    ready: bool


class V2Tensor(Answer, frozen=True):
    name: str
    datatype: str
    shape: Annotated[list[int], Meta(description="-1: a variable dimension")]


class V2Parameters(Answer, frozen=True):
    features: Annotated[list[str], Meta(description="the input's columns, in order")]


class V2ModelMetadata(Answer, frozen=True):
    name: str
    versions: list[str]
    platform: Platform
    inputs: list[V2Tensor]
    outputs: list[V2Tensor]
    parameters: V2Parameters


class BinaryData(Answer, frozen=True):
    binary_data_size: int


class V2Output(Answer, frozen=True):
    """One output: its data inline, or its size when sent binary after the JSON."""

    name: str
    datatype: str
    shape: list[int]
    data: list[float] | UnsetType = UNSET
    parameters: BinaryData | UnsetType = UNSET


class V2InferHead(Answer, frozen=True, omit_defaults=True):
    """The JSON of an inference answer (binary outputs follow it)."""

    model_name: str
    model_version: str
    outputs: list[V2Output]
    id: str = ""


class V2Error(Answer, frozen=True):
    """Every V2 error: the protocol's `{"error": message}`."""

    error: str


# -- the queue path ---------------------------------------------------------------------------


class QueueResult(Scored, frozen=True, kw_only=True):
    """risk-completed: the HTTP answer, then when it was enqueued, how long it took, and the delivery."""

    enqueued_time: str | None
    processing_ms: float
    delivery_count: int


class Rejection(Answer, frozen=True):
    """The rejected-queue record: why, which message, and its body (or an excerpt when huge)."""

    error: str
    detail: str
    message_id: str
    delivery_count: int
    body_bytes: int
    body_sha256: str | UnsetType = UNSET
    truncated: bool | UnsetType = UNSET
    body: str | UnsetType = UNSET
    body_base64: str | UnsetType = UNSET
