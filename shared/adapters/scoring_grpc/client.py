"""A Python client of `fraud.scoring.v1.Scoring`: payment events in, one JSON answer a line out.

    python -m shared.adapters.scoring_grpc.client --target 127.0.0.1:8001 --key "$KEY" < events.jsonl
    python -m shared.adapters.scoring_grpc.client --target 127.0.0.1:8001 --key "$KEY" --stream < events.jsonl

Each line of stdin is one event (`POST /api/score`'s body). Without `--stream`, one `Score` call
an event; with it, one `ScoreStream` call for them all, answers printed as they come (out of order:
each names its `event_id`, and the line it came from, from 0, as `id`).
An answer is the `Scored` JSON, or `{"error": code, "detail": ...}` as HTTP answers it. The key
is sent as `x-api-key` metadata (GRPC_KEYS; none on a loopback server without keys).

`score_stream` is what a gateway needs: it takes an async feed too, and when the server ends the
stream on purpose (a connection past GRPC_MAX_CONNECTION_AGE_MS, a replica going away, an idle
stream) it opens another and sends again the events not yet answered: at least once, none lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

import grpc

from shared.adapters.scoring_grpc import scoring_pb2 as pb

__all__ = ["answer_line", "main", "score_stream", "scores"]

log = logging.getLogger(__name__)

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
    channel: grpc.aio.Channel,
    events: Iterable[bytes] | AsyncIterable[bytes],
    key: str | None = None,
    per_message: int = 1,
    reopens: int = 5,
) -> AsyncIterator[pb.ScoreAnswer]:
    """`events` over `ScoreStream`, as a gateway sends them: `per_message` to a message (each with
    its place as `id`), answers yielded as they arrive, the stream half-closed once every event is
    sent. `events` may be async (a gateway's feed): a message goes as soon as it is full or the feed
    pauses.

    A stream the server ends on purpose is reopened and the events it had not answered are sent
    again: a connection past its age, a replica going away (UNAVAILABLE), a stream idle past its
    limit (`stream_idle`: the next stream opens with the next event). At most `reopens` times in a
    row without an answer between; any other error ends the call. An event may so be scored twice
    (its first answer lost with the stream): at least once, never dropped."""
    call = channel.stream_stream(
        SCORE_STREAM,
        request_serializer=pb.ScoreStreamRequest.SerializeToString,
        response_deserializer=pb.ScoreStreamResponse.FromString,
    )
    feed = _Feed(events)
    try:
        async for answer in _streams(call, feed, key, per_message, reopens):
            yield answer
    finally:
        feed.close()


async def _streams(
    call: Any, feed: _Feed, key: str | None, per_message: int, reopens: int
) -> AsyncIterator[pb.ScoreAnswer]:
    unanswered: dict[str, bytes] = {}  # id -> event: sent (or taken from the feed), not yet answered
    failures = 0
    while True:
        resent = list(unanswered.items())
        first = resent[0] if resent else await feed.next()  # NOTE: a new stream opens with an event
        if first is None:
            return
        unanswered[first[0]] = first[1]
        messages: list[list[str]] = []  # each message's ids, for an answer to a message as a whole
        turn = _Turn()
        try:
            async for response in call(
                _messages(first, resent[1:], feed, turn, per_message, unanswered, messages), metadata=_metadata(key)
            ):
                for answer in response.answers:
                    for answered in [answer.id] if answer.index >= 0 else messages[answer.message]:
                        unanswered.pop(answered, None)
                    failures = 0
                    yield answer
            return
        except grpc.aio.AioRpcError as exc:
            failures += 1
            if not _reopens(exc) or failures > reopens:
                raise
            await turn.end()  # NOTE: what its sender took from the feed is in `unanswered` before the next
            log.warning("ScoreStream ended (%s): reopening with %d unanswered", exc.code().name, len(unanswered))


async def _messages(
    first: tuple[str, bytes],
    resent: list[tuple[str, bytes]],
    feed: _Feed,
    turn: _Turn,
    per_message: int,
    unanswered: dict[str, bytes],
    messages: list[list[str]],
) -> AsyncIterator[pb.ScoreStreamRequest]:
    """One stream's messages: `first`, the events to send again, then the feed's while its turn lasts."""

    async def events() -> AsyncIterator[tuple[str, bytes]]:
        yield first
        for item in resent:
            yield item
        while (taken := await turn.take(feed, unanswered)) is not None:
            yield taken

    message, ids = pb.ScoreStreamRequest(), []
    async for id_, event in events():
        message.events.add(event=event, id=id_)
        ids.append(id_)
        if len(ids) == per_message or not feed.more_now():  # NOTE: a feed that pauses does not hold a message
            messages.append(ids)
            yield message
            message, ids = pb.ScoreStreamRequest(), []
    if ids:
        messages.append(ids)
        yield message


class _Turn:
    """One stream's turn at the feed. A stream's sender runs in grpc's task and may be waiting on the
    feed when its stream ends: `end` stops it, and waits until what it took is in `unanswered`."""

    def __init__(self) -> None:
        self._over = asyncio.Event()
        self._taking = False
        self._left = asyncio.Event()

    async def take(self, feed: _Feed, unanswered: dict[str, bytes]) -> tuple[str, bytes] | None:
        """The feed's next event, recorded as unanswered; None at its end or the turn's."""
        if self._over.is_set():
            return None
        self._taking, self._left = True, asyncio.Event()
        getter, stop = asyncio.ensure_future(feed.next()), asyncio.ensure_future(self._over.wait())
        taken = None
        try:
            await asyncio.wait((getter, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not getter.done():
                getter.cancel()  # NOTE: a cancelled wait on the feed takes nothing
            elif not getter.cancelled() and (taken := getter.result()) is not None:
                unanswered[taken[0]] = taken[1]  # NOTE: sent again if this stream ends before its answer
            self._taking = False
            self._left.set()
        return None if self._over.is_set() else taken

    async def end(self) -> None:
        self._over.set()
        if self._taking:
            await self._left.wait()


class _Feed:
    """The events with their places (from 0, as `id`), taken one at a time. An async feed is pumped
    in by a task, so a stream that ends while waiting for the next event (its request iterator
    cancelled) loses nothing: the next stream takes it."""

    _END = object()

    def __init__(self, events: Iterable[bytes] | AsyncIterable[bytes]) -> None:
        self._place = 0
        self._queue: asyncio.Queue[Any] | None = None
        self._pump: asyncio.Future[None] | None = None
        self._events: Iterator[bytes] | None = None
        if isinstance(events, AsyncIterable):
            self._queue = asyncio.Queue(1)
            self._pump = asyncio.ensure_future(self._fill(events, self._queue))
        else:
            self._events = iter(events)

    async def _fill(self, events: AsyncIterable[bytes], queue: asyncio.Queue[Any]) -> None:
        async for event in events:
            await queue.put(event)
        await queue.put(self._END)

    async def next(self) -> tuple[str, bytes] | None:
        """The next event and its id; None once they are all taken."""
        event: Any
        if self._queue is None:
            event = next(self._events, self._END) if self._events is not None else self._END
        else:
            event = await self._queue.get()  # NOTE: a cancelled wait takes nothing
            if event is self._END:
                self._queue.put_nowait(event)  # NOTE: the end stays for whoever asks next
        if event is self._END:
            return None
        self._place += 1
        return str(self._place - 1), event

    def more_now(self) -> bool:
        """Whether another event is there without waiting (a list's always is)."""
        return self._queue is None or not self._queue.empty()

    def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()


def _reopens(exc: grpc.aio.AioRpcError) -> bool:
    """Whether the server ended the stream for the caller to open another: UNAVAILABLE (a connection
    past GRPC_MAX_CONNECTION_AGE_MS, a replica going away) or `stream_idle`."""
    code = dict(exc.trailing_metadata() or ()).get("x-error-code")
    return exc.code() == grpc.StatusCode.UNAVAILABLE or code == "stream_idle"


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
