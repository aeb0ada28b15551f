"""What the `fraud.scoring.v1` tests send and read: events, raw stream messages, answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.client import SCORE, SCORE_STREAM
from tests.conftest import event

__all__ = ["answers_of", "body", "decided", "message", "raw_score", "raw_stream", "write_all"]


def body(**overrides: object) -> bytes:
    return json.dumps(event(**overrides)).encode()


def decided(answer: bytes) -> dict[str, Any]:
    """An answer without what differs between two scorings of one event (timings, cache or model)."""
    found = json.loads(answer)
    return {k: v for k, v in found.items() if k not in ("timings_ms", "source")}


def raw_stream(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> Any:
    """A stream whose messages the test writes as bytes (undecodable ones too)."""
    method = channel.stream_stream(
        SCORE_STREAM, request_serializer=lambda b: b, response_deserializer=pb.ScoreStreamResponse.FromString
    )
    return method(metadata=metadata)


def raw_score(channel: grpc.aio.Channel) -> Any:
    """`Score`, its request written as bytes."""
    return channel.unary_unary(SCORE, request_serializer=lambda b: b, response_deserializer=pb.ScoreResponse.FromString)


def message(*bodies: bytes, model: str = "") -> bytes:
    """A ScoreStreamRequest of `bodies`, each with its place as `id` (`e0`, `e1`...)."""
    request = pb.ScoreStreamRequest()
    for i, b in enumerate(bodies):
        request.events.add(event=b, id=f"e{i}", model=model)
    return bytes(request.SerializeToString())


async def answers_of(call: Any, count: int, wait_s: float = 10) -> list[pb.ScoreAnswer]:
    """The next `count` answers of a stream (an end before them fails)."""
    found: list[pb.ScoreAnswer] = []
    while len(found) < count:
        response = await asyncio.wait_for(call.read(), wait_s)
        assert response is not grpc.aio.EOF, f"the stream ended after {len(found)} of {count} answers"
        found.extend(response.answers)
    return found


async def write_all(call: Any, messages: list[bytes]) -> None:
    """Every message written, then the stream half-closed."""
    for raw in messages:
        await call.write(raw)
    await call.done_writing()
