"""The event gRPC doors, driven the way a gateway drives them: for bench/worker.py's app phases.

    unary(target, key, bodies, in_flight)             one `Score` call an event, `in_flight` at a time
    stream(target, key, bodies, in_flight, per_msg)   one `ScoreStream` for them all, `in_flight` events
                                                 outstanding, `per_msg` events to a request message

Both return the wall seconds and the verdicts read from each answer (bench/verdicts.py): a JSON
answer with a decision is `completed`, an error its `rejected:<code>` or `shed:<code>`. The gRPC
port is the app's own (GRPC_PORT): these calls never pass the Functions host, so the worker
process's CPU over a phase is all a replica spends on them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import grpc
import orjson

from bench.verdicts import Verdicts
from shared.adapters.oip.grpc_server import KEY_METADATA as KEY
from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.client import SCORE, SCORE_STREAM

__all__ = ["stream", "unary"]


def _scored(body: bytes) -> str:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "scored_unreadable"
    return "completed" if isinstance(answer, dict) and "decision" in answer else "scored_no_decision"


def _answer_verdict(answer: pb.ScoreAnswer) -> str:
    if answer.WhichOneof("outcome") == "scored":
        return _scored(answer.scored)
    error = answer.error
    return f"{'rejected' if error.status < 500 else 'shed'}:{error.code}"


async def _unary(target: str, key: str, bodies: Sequence[bytes], in_flight: int, verdicts: Verdicts) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            SCORE,
            request_serializer=pb.ScoreRequest.SerializeToString,
            response_deserializer=pb.ScoreResponse.FromString,
        )
        slots = asyncio.Semaphore(in_flight)

        async def one(body: bytes) -> None:
            async with slots:
                try:
                    verdicts.add(_scored((await call(pb.ScoreRequest(event=body), metadata=((KEY, key),))).scored))
                except grpc.aio.AioRpcError as exc:
                    code = dict(exc.trailing_metadata() or ()).get("x-error-code", exc.code().name.lower())
                    verdicts.add(f"grpc:{code}")

        await asyncio.gather(*(one(b) for b in bodies))


async def _stream(
    target: str, key: str, bodies: Sequence[bytes], in_flight: int, per_message: int, verdicts: Verdicts
) -> None:
    room = asyncio.Semaphore(in_flight)  # events sent and not yet answered

    async def requests() -> AsyncIterator[pb.ScoreStreamRequest]:
        for start in range(0, len(bodies), per_message):
            chunk = bodies[start : start + per_message]
            for _ in chunk:
                await room.acquire()
            message = pb.ScoreStreamRequest()
            for place, body in enumerate(chunk, start):
                message.events.add(event=body, id=str(place))
            yield message

    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream(
            SCORE_STREAM,
            request_serializer=pb.ScoreStreamRequest.SerializeToString,
            response_deserializer=pb.ScoreStreamResponse.FromString,
        )
        async for response in call(requests(), metadata=((KEY, key),)):
            for answer in response.answers:
                verdicts.add(_answer_verdict(answer))
                room.release()


def unary(target: str, key: str, bodies: Sequence[bytes], in_flight: int) -> tuple[float, Verdicts]:
    verdicts = Verdicts("grpc_unary")
    started = time.perf_counter()
    asyncio.run(_unary(target, key, bodies, in_flight, verdicts))
    return time.perf_counter() - started, verdicts


def stream(
    target: str, key: str, bodies: Sequence[bytes], in_flight: int, per_message: int = 1
) -> tuple[float, Verdicts]:
    verdicts = Verdicts("grpc_stream")
    started = time.perf_counter()
    asyncio.run(_stream(target, key, bodies, in_flight, per_message, verdicts))
    return time.perf_counter() - started, verdicts
