"""The one error tree of the service.

    ScoringError                  500 internal         (queue: retry)
    ├── BadRequest                400 bad_request      (queue: reject)
    │   ├── MalformedJson         400 malformed_json
    │   ├── InvalidEvent          422 invalid_event
    │   ├── TooManyItems          422 too_many_items
    │   ├── UnsupportedMediaType  415 unsupported_media_type
    │   └── PayloadTooLarge       413 payload_too_large
    ├── ModelNotFound             404 model_not_found  (queue: reject)
    ├── ModelInvalid              422 model_invalid    (blob: not retried)
    ├── NotReady                  503 not_ready        (queue: retry)
    ├── ModelSourceError          503 model_source     (retry)
    └── InferenceFailed           500 inference_failed (queue: retry)
        └── BatchShapeError       500 batch_shape

Each class fixes its HTTP status, a stable machine-readable `code` and whether
a queue message that hit it should be retried (transient) or rejected with the
reason (it will never succeed). Foreign exceptions are translated inside the
adapter that calls the foreign library (`raise InferenceFailed(...) from exc`).
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "BatchShapeError",
    "InferenceFailed",
    "InvalidEvent",
    "MalformedJson",
    "ModelInvalid",
    "ModelNotFound",
    "ModelSourceError",
    "NotReady",
    "PayloadTooLarge",
    "ScoringError",
    "TooManyItems",
    "UnsupportedMediaType",
    "error_body",
]


class ScoringError(Exception):
    """Base of every error the service raises on purpose."""

    status: int = 500
    code: str = "internal"
    retryable: bool = True

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ScoringError):
    status, code, retryable = 400, "bad_request", False


class MalformedJson(BadRequest):
    status, code = 400, "malformed_json"


class InvalidEvent(BadRequest):
    status, code = 422, "invalid_event"


class TooManyItems(BadRequest):
    status, code = 422, "too_many_items"


class UnsupportedMediaType(BadRequest):
    status, code = 415, "unsupported_media_type"


class PayloadTooLarge(BadRequest):
    status, code = 413, "payload_too_large"


class ModelNotFound(ScoringError):
    status, code, retryable = 404, "model_not_found", False


class ModelInvalid(ScoringError):
    status, code, retryable = 422, "model_invalid", False


class NotReady(ScoringError):
    status, code, retryable = 503, "not_ready", True


class ModelSourceError(ScoringError):
    status, code, retryable = 503, "model_source", True


class InferenceFailed(ScoringError):
    status, code, retryable = 500, "inference_failed", True


class BatchShapeError(InferenceFailed):
    code = "batch_shape"


def error_body(exc: ScoringError) -> dict[str, str]:
    """The JSON body every adapter answers an error with."""
    return {"error": exc.code, "detail": exc.detail}
