"""`fraud.scoring.v1.Scoring`: one payment event (`Score`) or a stream of them (`ScoreStream`).

Each event is scored by the core's single-event entry, `ScoringService.score_json`, the call the
HTTP `score` route makes: the same decoder and validation (so the same error codes), admission,
features, caches, micro-batcher, review tail and prediction log (codec.py says why the event and
its answer travel as JSON bytes).

`Score` is registered stream-unary, as the V2 methods are (`guarded`): its one message is awaited
at most BODY_TIMEOUT_MS; an error is the status its class names (`ScoringError.grpc_status`), its
detail, and its code in the `x-error-code` trailing metadata. An event over MAX_BODY_BYTES is
refused (`payload_too_large`) before it is decoded, as HTTP refuses such a body. `ScoreStream`:
shared/adapters/scoring_grpc/stream.py. Messages arrive as raw bytes and are parsed here, so that
an undecodable one is answered with its error rather than ending the call.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import grpc

from shared.adapters.oip.grpc_server import guarded
from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.codec import Limits, parsed, score_event
from shared.adapters.scoring_grpc.stream import EventStream
from shared.domain.answers import encode

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from shared.core.service import ScoringService

__all__ = ["SERVICE", "handler", "limits_of"]

SERVICE = "fraud.scoring.v1.Scoring"


def limits_of(core: ScoringService) -> Limits:
    limits = core.limits
    return Limits(
        limits.max_body_bytes, limits.max_batch_items, limits.grpc_stream_max_in_flight, limits.grpc_stream_idle_s
    )


def handler(core: ScoringService, request_wait_s: float) -> grpc.GenericRpcHandler[Any, Any]:
    """`Score` and `ScoreStream` over `core`; the key is the server's interceptor's."""
    limits = limits_of(core)

    async def score(request: bytes, context: Any) -> pb.ScoreResponse:
        started = time.perf_counter()
        scored = await score_event(core, parsed(pb.ScoreRequest, request), limits, started)
        return pb.ScoreResponse(scored=encode(scored))

    async def score_stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await EventStream(core, limits, context).run(requests)

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Score": grpc.stream_unary_rpc_method_handler(
                guarded("Score", score, request_wait_s), response_serializer=_serialized
            ),
            "ScoreStream": grpc.stream_stream_rpc_method_handler(score_stream, response_serializer=_serialized),
        },
    )


def _serialized(message: pb.ScoreResponse | pb.ScoreStreamResponse) -> bytes:
    serialized: bytes = message.SerializeToString()
    return serialized
