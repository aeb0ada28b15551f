"""A Python client of `fraud.scoring.v1.Scoring`: payment events in, one JSON answer a line out.

    python -m shared.adapters.scoring_grpc.client --target 127.0.0.1:8001 --key "$KEY" < events.jsonl
    python -m shared.adapters.scoring_grpc.client --target 127.0.0.1:8001 --key "$KEY" --stream < events.jsonl

Each line of stdin is one event (`POST /api/score`'s body). Without `--stream`, one `Score` call
an event; with it, one `ScoreStream` call for them all, answers printed as they come (out of order:
each names its `event_id`, and the line it came from, from 0, as `id`).
An answer is the `Scored` JSON, or `{"error": code, "detail": ...}` as HTTP answers it. The key
is sent as `x-api-key` metadata (GRPC_KEYS; none on a loopback server without keys).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterable

import grpc

from shared.adapters.scoring_grpc import scoring_pb2 as pb

__all__ = ["answer_line", "main", "score_stream", "scores"]

SCORE = "/fraud.scoring.v1.Scoring/Score"
SCORE_STREAM = "/fraud.scoring.v1.Scoring/ScoreStream"


def _metadata(key: str | None) -> tuple[tuple[str, str], ...]:
    return (("x-api-key", key),) if key else ()


async def scores(channel: grpc.aio.Channel, events: Iterable[bytes], key: str | None = None) -> AsyncIterator[str]:
    """One `Score` call an event, in order: each answer as a JSON line."""
    call = channel.unary_unary(
        SCORE, request_serializer=pb.ScoreRequest.SerializeToString, response_deserializer=pb.ScoreResponse.FromString
    )
    for event in events:
        try:
            yield (await call(pb.ScoreRequest(event=event), metadata=_metadata(key))).scored.decode()
        except grpc.aio.AioRpcError as exc:
            code = dict(exc.trailing_metadata() or ()).get("x-error-code", exc.code().name.lower())
            yield json.dumps({"error": code, "detail": exc.details()})


async def score_stream(
    channel: grpc.aio.Channel, events: Iterable[bytes], key: str | None = None, per_message: int = 1
) -> AsyncIterator[pb.ScoreAnswer]:
    """One `ScoreStream` call: `events` sent `per_message` to a message (each with its place as `id`),
    answers yielded as they arrive; the stream is half-closed once every event is sent."""
    call = channel.stream_stream(
        SCORE_STREAM,
        request_serializer=pb.ScoreStreamRequest.SerializeToString,
        response_deserializer=pb.ScoreStreamResponse.FromString,
    )

    async def requests() -> AsyncIterator[pb.ScoreStreamRequest]:
        message = pb.ScoreStreamRequest()
        for place, event in enumerate(events):
            message.events.add(event=event, id=str(place))
            if len(message.events) == per_message:
                yield message
                message = pb.ScoreStreamRequest()
        if message.events:
            yield message

    async for response in call(requests(), metadata=_metadata(key)):
        for answer in response.answers:
            yield answer


def answer_line(answer: pb.ScoreAnswer) -> str:
    """A stream's answer as one JSON line: the `Scored` JSON, or the error as HTTP answers it."""
    if answer.WhichOneof("outcome") == "scored":
        return str(answer.scored.decode())
    error = answer.error
    return json.dumps({"error": error.code, "detail": error.detail, "id": answer.id, "event_id": answer.event_id})


async def _run(args: argparse.Namespace) -> None:
    events = [line.strip().encode() for line in sys.stdin.read().splitlines() if line.strip()]
    async with grpc.aio.insecure_channel(args.target) as channel:
        if args.stream:
            async for answer in score_stream(channel, events, args.key):
                print(answer_line(answer), flush=True)
        else:
            async for line in scores(channel, events, args.key):
                print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--target", default="127.0.0.1:8001", help="host:port of GRPC_PORT")
    parser.add_argument("--key", default=None, help="one of GRPC_KEYS (x-api-key)")
    parser.add_argument("--stream", action="store_true", help="one ScoreStream call instead of a Score call an event")
    asyncio.run(_run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
