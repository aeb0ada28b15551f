"""The one error tree of the service.

    ScoringError                  500 internal          INTERNAL           (queue: retry)
    ├── BadRequest                400 bad_request       INVALID_ARGUMENT   (queue: reject)
    │   ├── MalformedJson         400 malformed_json    INVALID_ARGUMENT
    │   ├── InvalidEvent          422 invalid_event     INVALID_ARGUMENT
    │   ├── TooManyItems          422 too_many_items    INVALID_ARGUMENT
    │   ├── UnsupportedMediaType  415 unsupported_media_type  INVALID_ARGUMENT
    │   ├── PayloadTooLarge       413 payload_too_large RESOURCE_EXHAUSTED
    │   └── BodyTimeout           408 body_timeout      DEADLINE_EXCEEDED
    │       └── StreamIdle        408 stream_idle       DEADLINE_EXCEEDED  (a ScoreStream silent past GRPC_STREAM_IDLE_MS)
    ├── ModelNotFound             404 model_not_found   NOT_FOUND          (queue: reject)
    ├── ModelInvalid              422 model_invalid     FAILED_PRECONDITION (blob: not retried)
    ├── RolloutConflict           409 rollout_conflict  FAILED_PRECONDITION (a shadow or canary the model's state refuses)
    ├── EventIdConflict           409 event_id_conflict ALREADY_EXISTS     (queue: reject; the id's first payment keeps its result)
    ├── EventExpired              422 event_expired     FAILED_PRECONDITION (queue: reject; older than the idempotency window)
    ├── NotReady                  503 not_ready         UNAVAILABLE        (queue: retry)
    │   ├── BatcherClosed         503 model_retired     UNAVAILABLE        (resubmit to the new version)
    │   │   └── RunOverBudget     503 run_over_budget   UNAVAILABLE        (a run past its deadline or memory cap:
    │   │                                                                    its version is quarantined; resubmit)
    │   └── SettingsError         503 not_ready         UNAVAILABLE        (the operator must fix a setting)
    ├── ModelSourceError          503 model_source      UNAVAILABLE        (retry)
    │   └── WarmupStarved         503 cpu_starved       UNAVAILABLE        (a warm-up starved of CPU: not recorded, the next load tries again)
    ├── Unavailable               503 unavailable       UNAVAILABLE        (queue: retry)
    │   ├── ResultStoreDown       503 result_store_down UNAVAILABLE        (queue: retry; nothing published)
    │   ├── ControlStoreDown      503 control_store_down UNAVAILABLE       (a pin or model record not kept; nothing changed)
    │   ├── PublishFailed         503 publish_failed    UNAVAILABLE        (queue: retry; stored result republished)
    │   ├── BatchIncomplete       503 batch_incomplete  UNAVAILABLE        (queue: the host redelivers the batch)
    │   ├── Overloaded            503 overloaded        UNAVAILABLE        (shed at once, Retry-After; queue: retry)
    │   ├── CpuStarved            503 cpu_starved       UNAVAILABLE        (a model run starved of CPU; its version not blamed)
    │   └── DeadlineExceeded      503 deadline_exceeded DEADLINE_EXCEEDED  (work abandoned, Retry-After; queue: retry)
    ├── InferenceFailed           500 inference_failed  INTERNAL           (queue: retry)
    ├── Unexpected                500 unexpected        INTERNAL           (queue: reject that message alone, never its batch)
    │   └── BatchShapeError       500 batch_shape       INTERNAL
    ├── ReviewNotFound            404 review_not_found  NOT_FOUND          (no review of that event is kept)
    └── ReviewFailed              502 review_failed     UNAVAILABLE        (the local decision stands)
        ├── ReviewTimeout         504 review_timeout    DEADLINE_EXCEEDED
        ├── ReviewRateLimited     429 review_rate_limited  RESOURCE_EXHAUSTED  (Retry-After honoured)
        ├── ReviewInvalid         502 review_invalid    INTERNAL           (the answer broke the schema)
        └── ReviewSkipped         503 review_skipped    UNAVAILABLE        (a bound said no: rate, share, breaker)

Each class fixes its HTTP status, its gRPC status name (the `grpc.StatusCode` member a
gRPC adapter answers with), a stable machine-readable `code`, and whether a queue message
that hit it should be retried (transient, or the service's own state) or rejected with the
reason (the message's own fault: it will never succeed). Foreign exceptions are translated
inside the adapter that calls the foreign library (`raise InferenceFailed(...) from exc`).

Every surface logs an error it answers the same way: shared/adapters/answered.py (`log_answered`).
"""

from __future__ import annotations

import math

__all__ = [
    "BadRequest",
    "BatchIncomplete",
    "BatchShapeError",
    "BatcherClosed",
    "BodyTimeout",
    "ControlStoreDown",
    "CpuStarved",
    "DeadlineExceeded",
    "EventExpired",
    "EventIdConflict",
    "InferenceFailed",
    "InvalidEvent",
    "MalformedJson",
    "ModelInvalid",
    "ModelNotFound",
    "ModelSourceError",
    "NotReady",
    "Overloaded",
    "PayloadTooLarge",
    "PublishFailed",
    "ResultStoreDown",
    "ReviewFailed",
    "ReviewInvalid",
    "ReviewNotFound",
    "ReviewRateLimited",
    "ReviewSkipped",
    "ReviewTimeout",
    "RolloutConflict",
    "RunOverBudget",
    "ScoringError",
    "SettingsError",
    "SinkError",
    "TooManyItems",
    "Unavailable",
    "Unexpected",
    "Unshareable",
    "UnsupportedMediaType",
    "WarmupStarved",
    "retry_after",
]


class ScoringError(Exception):
    """Base of every error the service raises on purpose."""

    status: int = 500
    grpc_status: str = "INTERNAL"
    code: str = "internal"
    retryable: bool = True
    retry_after_s: float | None = None  # set where the caller should wait: HTTP says so in Retry-After

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ScoringError):
    status, grpc_status, code, retryable = 400, "INVALID_ARGUMENT", "bad_request", False


class MalformedJson(BadRequest):
    status, code = 400, "malformed_json"


class InvalidEvent(BadRequest):
    status, code = 422, "invalid_event"


class TooManyItems(BadRequest):
    status, code = 422, "too_many_items"


class UnsupportedMediaType(BadRequest):
    status, code = 415, "unsupported_media_type"


class PayloadTooLarge(BadRequest):
    status, grpc_status, code = 413, "RESOURCE_EXHAUSTED", "payload_too_large"


class BodyTimeout(BadRequest):
    """The request body did not arrive whole within BODY_TIMEOUT_MS."""

    status, grpc_status, code = 408, "DEADLINE_EXCEEDED", "body_timeout"


class StreamIdle(BodyTimeout):
    """A `ScoreStream` neither sent an event nor took an answer within GRPC_STREAM_IDLE_MS."""

    code = "stream_idle"


class ModelNotFound(ScoringError):
    status, grpc_status, code, retryable = 404, "NOT_FOUND", "model_not_found", False


class ModelInvalid(ScoringError):
    status, grpc_status, code, retryable = 422, "FAILED_PRECONDITION", "model_invalid", False


class RolloutConflict(ScoringError):
    """A shadow or canary change the model's state refuses (e.g. a canary of the version that serves)."""

    status, grpc_status, code, retryable = 409, "FAILED_PRECONDITION", "rollout_conflict", False


class EventIdConflict(ScoringError):
    """An event id already names a different payment: the id binds its first content, whose result
    stands; this one is neither scored nor given that result."""

    status, grpc_status, code, retryable = 409, "ALREADY_EXISTS", "event_id_conflict", False


class EventExpired(ScoringError):
    """An event older than the idempotency window (EVENT_MAX_AGE_S): its first result may have been
    published and is no longer kept, so it is not scored a second time."""

    status, grpc_status, code, retryable = 422, "FAILED_PRECONDITION", "event_expired", False


class NotReady(ScoringError):
    status, grpc_status, code, retryable = 503, "UNAVAILABLE", "not_ready", True


class BatcherClosed(NotReady):
    """The batcher was drained (its model version was replaced); resubmit to the new one."""

    code = "model_retired"


class RunOverBudget(BatcherClosed):
    """A model run was stopped by its deadline or refused by the memory cap (shared/models/bounds.py).

    The registry quarantines the version; the caller resubmits, and the last good version answers.
    """

    code = "run_over_budget"

    def __init__(self, detail: str, *, limit: str = "deadline") -> None:
        super().__init__(detail)
        self.limit = limit  # "deadline" or "memory"


class SettingsError(NotReady):
    """A setting has a value the service cannot run with; the detail names it and what is expected.

    Its code stays `not_ready`: to a caller it is the same retry-later answer.
    """


class ModelSourceError(ScoringError):
    status, grpc_status, code, retryable = 503, "UNAVAILABLE", "model_source", True


class WarmupStarved(ModelSourceError):
    """A version's warm-up (or golden check) run starved of CPU each of its tries (shared/models/onnx.py,
    WARM_TRIES), or its sandbox trial starved (shared/models/sandbox.py: a starved run, or its wall limit
    reached on under a quarter of its CPU): the replica's state, not the file's. Not a rejection: nothing is recorded against the file
    and its next load (the next Blob delivery, sync pass or start) tries again. Its code is `cpu_starved`,
    the answer to a run starved at score time; a `ModelSourceError`, so whatever takes a source that cannot
    give a version now (an ensemble's meta-model, a pin's load) takes this too."""

    code = "cpu_starved"
    retry_after_s = 1.0


# -- the queue path (shared/queue) ----------------------------------------------------


class Unavailable(ScoringError):
    """Not now: a dependency is down or the process is full; try later (a message is redelivered)."""

    status, grpc_status, code, retryable = 503, "UNAVAILABLE", "unavailable", True


class ResultStoreDown(Unavailable):
    """The idempotency store (Redis) did not answer: nothing is scored or published for it."""

    code = "result_store_down"


class ControlStoreDown(Unavailable):
    """The fleet's control records (Redis) could not be read or written: a pin, a release or a
    version record was not kept, so nothing was changed; the caller may try again."""

    code = "control_store_down"


class PublishFailed(Unavailable):
    """Sending to Service Bus failed; the stored result is republished on redelivery."""

    code = "publish_failed"


class BatchIncomplete(Unavailable):
    """Some messages of a batch failed transiently; raised so the host redelivers the batch."""

    code = "batch_incomplete"


class Overloaded(Unavailable):
    """More work in progress than the process takes (MAX_INFLIGHT, or a model version's batch queue of 1024 rows): turned away
    at once, before any work, rather than queued behind what is already late."""

    code = "overloaded"
    retry_after_s = 1.0


class CpuStarved(Unavailable):
    """A model run that waited for a CPU past STARVED_GRACE deadlines (CPU throttling at the replica's limit, a
    saturated core): stopped, its version not blamed (it had not used its deadline's CPU; shared/models/bounds.py)."""

    code = "cpu_starved"
    retry_after_s = 1.0


class DeadlineExceeded(Unavailable):
    """The work of a request outlasted REQUEST_TIMEOUT_MS: abandoned, and the caller told."""

    grpc_status, code = "DEADLINE_EXCEEDED", "deadline_exceeded"
    retry_after_s = 1.0


class Unexpected(ScoringError):
    """A fault of ours that one message met (a foreign exception no adapter translated): that message
    is rejected with the exception's class, and its batch's other messages go on."""

    status, code, retryable = 500, "unexpected", False


class InferenceFailed(ScoringError):
    status, grpc_status, code, retryable = 500, "INTERNAL", "inference_failed", True


class BatchShapeError(InferenceFailed):
    code = "batch_shape"


# -- the review of the uncertain tail (shared/review) ---------------------------------


class ReviewNotFound(ScoringError):
    status, grpc_status, code, retryable = 404, "NOT_FOUND", "review_not_found", False


class ReviewFailed(ScoringError):
    """Azure OpenAI gave no usable review. Never the caller's error: the local decision stands."""

    status, grpc_status, code, retryable = 502, "UNAVAILABLE", "review_failed", True


class ReviewTimeout(ReviewFailed):
    status, grpc_status, code = 504, "DEADLINE_EXCEEDED", "review_timeout"


class ReviewRateLimited(ReviewFailed):
    """429 from Azure OpenAI; `retry_after_s` is what its Retry-After header asked for."""

    status, grpc_status, code = 429, "RESOURCE_EXHAUSTED", "review_rate_limited"

    def __init__(self, detail: str, retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class ReviewInvalid(ReviewFailed):
    status, grpc_status, code = 502, "INTERNAL", "review_invalid"


class ReviewSkipped(ReviewFailed):
    """No call was made: the rate, the share or the breaker said no; `detail` says which."""

    status, grpc_status, code = 503, "UNAVAILABLE", "review_skipped"


def retry_after(exc: ScoringError) -> str | None:
    """The Retry-After value of an error that says when to come back: whole seconds, at least 1."""
    if exc.retry_after_s is None:
        return None
    return str(max(1, math.ceil(exc.retry_after_s)))


# -- outside the tree: never answered, caught where raised -------------------------------------
# A prediction-log sink's failure (shared/stores/prediction_log): the log retries or counts it;
# no request ever waits for a sink, so none is answered with it.


class SinkError(Exception):
    """A write that did not land whole: `landed` leading bytes did (whole lines); `permanent`: the rest never will."""

    def __init__(self, detail: str, *, landed: int = 0, permanent: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.landed = landed
        self.permanent = permanent


# A drift reference one replica cannot share with the fleet, or the fleet's one it cannot use
# (shared/fleet/references.py): drift keeps this replica's own; nothing is answered with it.


class Unshareable(ValueError):
    """This replica's reference cannot be shared, or the fleet's cannot be used (the message says which)."""
