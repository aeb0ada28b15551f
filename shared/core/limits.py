"""What an adapter must know of the settings, and nothing more (the core keeps the rest).

max_body_bytes, max_batch_items   an event's body cap (a batch: 16 times it) and items per batch
body_timeout_s                    how long a request's body may take to arrive whole
max_model_bytes, models_container a model blob's cap, and the container its trigger watches
review_queue_wait_s               how long the queue path lets a review hold an answer
grpc_*                            the gRPC listener: its port (0: none), keys, calls, a stream's events in
                                  flight, how long a stream may stand idle and a connection live
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import Settings

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps and listener settings adapters read (`ScoringService.limits`)."""

    max_body_bytes: int
    max_batch_items: int
    body_timeout_s: float
    max_model_bytes: int
    models_container: str
    review_queue_wait_s: float
    grpc_port: int
    grpc_keys: str | None
    grpc_max_concurrent: int
    grpc_stream_max_in_flight: int
    grpc_stream_idle_s: float
    grpc_connection_age_ms: int
    grpc_connection_age_grace_ms: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            max_body_bytes=settings.max_body_bytes,
            max_batch_items=settings.max_batch_items,
            body_timeout_s=settings.body_timeout_ms / 1000,
            max_model_bytes=settings.max_model_bytes,
            models_container=settings.models_container,
            review_queue_wait_s=settings.review.queue_timeout_ms / 1000,
            grpc_port=settings.grpc_port,
            grpc_keys=settings.grpc_keys,
            grpc_max_concurrent=settings.grpc_max_concurrent,
            grpc_stream_max_in_flight=settings.grpc_stream_max_in_flight,
            grpc_stream_idle_s=settings.grpc_stream_idle_ms / 1000,
            grpc_connection_age_ms=settings.grpc_max_connection_age_ms,
            grpc_connection_age_grace_ms=settings.grpc_max_connection_age_grace_ms,
        )
