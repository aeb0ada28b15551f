"""One `ScoreStream` call: events in as they come, each answered once, as soon as it is scored.

A gateway keeps one stream open and sends events as they arrive, one or several to a message.
An event alone in its message is scored as its own task by the core's single-event entry
(codec.py): the events of a stream share micro-batches with each other and with every other door.
The events of a message of several (one model, no `explain`) are scored together, as
`/api/score/batch` scores its items: one admission slot, one feature read per user, one cache lookup
and one model run a chunk, in parts of at most the stream's cap (a gateway that packs what it has
cuts the CPU per event ~5x: docs/capacity.md). Each answer goes out when it is ready: out of order,
several to a response message when several are ready, each naming its event (`event_id`, the
caller's `id`, and the message and place it came in).

Back-pressure. The stream holds at most GRPC_STREAM_MAX_IN_FLIGHT events at once, counted from
when an event is read until its answer has been written: being scored, or answered but waiting
for the client to take the answer. At the cap the stream is not read, so HTTP/2 flow control
holds the sender; a client that does not read its answers stops its own stream, and nothing
buffers without bound on the server. Admission applies to a lone event as to an HTTP request, and
to a message of several once, as to a batch (a refusal is each of its events' `overloaded` answer).

Bad input is answered, and the stream stays open: an undecodable message, a message without
events or with more than MAX_BATCH_ITEMS (answered once, `index` -1), an event over MAX_BODY_BYTES,
an event that is not JSON or not valid (each answered with its code, as HTTP answers it). What
ends a stream: the client half-closing it (then every pending answer is sent and the status is OK),
a call without a key (the server's interceptor: UNAUTHENTICATED), what the transport itself
refuses (a message over the server's message cap, 16 x MAX_BODY_BYTES: RESOURCE_EXHAUSTED), or
GRPC_STREAM_IDLE_MS without an answer made or written while none of its events is being scored
(DEADLINE_EXCEEDED, `stream_idle` in `x-error-code`): a stream left open and silent gives its call
slot back (GRPC_MAX_CONCURRENT counts calls). One whose client stopped reading is no longer read
or scored for; its end waits behind its unread answers, and its slot behind its connection's age.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from shared.adapters.answered import log_answered
from shared.adapters.oip.grpc_server import refuse
from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.codec import Limits, decoded, error_of, event_id_of, parsed, score_event
from shared.domain.answers import encode
from shared.errors import BadRequest, ScoringError, StreamIdle, TooManyItems

if TYPE_CHECKING:
    import grpc

    from shared.core.service import ScoringService

__all__ = ["EventStream"]

log = logging.getLogger(__name__)

# An answer ready to go: (message, index, id, event_id, the scored answer's JSON, or its error)
Ready = tuple[int, int, str, str, bytes | None, pb.Error | None]


class EventStream:
    """The state of one stream: its room (slots), the answers ready, and the tasks scoring."""

    def __init__(self, core: ScoringService, limits: Limits, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._core = core
        self._limits = limits
        self._context = context
        self._room = asyncio.Semaphore(limits.in_flight)
        self._held = 0  # events read and not yet answered on the wire
        self._ready: list[Ready] = []
        self._wake = asyncio.Event()
        self._scoring: set[asyncio.Task[None]] = set()
        self._messages = 0  # request messages read
        self._moved = time.monotonic()  # when an answer was last made or written (`_put`, `_write`)
        self._ending = False  # idle: the writer stops at its next turn

    async def run(self, requests: AsyncIterator[bytes]) -> None:
        """Read, score and answer until the client half-closes and every answer is written; end the
        call if the stream stands idle (no answer made or written, none being scored) for its limit."""
        reader = asyncio.ensure_future(self._read(requests))
        reader.add_done_callback(lambda _: self._wake.set())
        writer = asyncio.ensure_future(self._write(reader))
        try:
            while not writer.done():  # NOTE: one timer an idle period, nothing a message
                left = self._moved + self._limits.idle_s - time.monotonic()
                if left <= 0 and self._scoring:  # NOTE: events being scored: the wait is ours, not the client's
                    self._moved, left = time.monotonic(), self._limits.idle_s
                elif left <= 0:
                    await self._end_idle(reader, writer)
                await asyncio.wait((writer,), timeout=left)
            writer.result()
        finally:
            writer.cancel()
            reader.cancel()
            for task in self._scoring:
                task.cancel()

    async def _end_idle(self, reader: asyncio.Future[None], writer: asyncio.Future[None]) -> None:
        """Stop reading, then end the call `stream_idle` once no write is pending: the status cannot
        pass an answer the client has not taken (HTTP/2 flow control), and grpc.aio cannot reset a
        call from the server, so a client that stopped reading gets its end when it reads again."""
        reader.cancel()
        self._ending = True
        self._wake.set()
        await asyncio.wait((writer,))  # NOTE: the writer ends at its next turn, after a pending write
        idle = StreamIdle(f"nothing read or written for GRPC_STREAM_IDLE_MS ({self._limits.idle_s * 1000:.0f} ms)")
        await refuse(self._context, idle, "ScoreStream")

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        async for raw in requests:
            started = time.perf_counter()
            number = self._messages
            self._messages += 1
            try:
                events = parsed(pb.ScoreStreamRequest, raw).events
                if not events:
                    raise BadRequest("a message without events")
                if len(events) > self._limits.events_per_message:
                    raise TooManyItems(
                        f"at most {self._limits.events_per_message} events per message, got {len(events)}"
                    )
            except ScoringError as exc:
                await self._take_room()
                self._refused(number, -1, "", "", exc)
                continue
            if len(events) > 1 and _together(events):
                step = self._limits.in_flight  # NOTE: a part takes its room whole: never more than the cap
                for first in range(0, len(events), step):
                    part = events[first : first + step]
                    for _ in part:
                        await self._take_room()
                    self._start(self._score_message(number, first, part))
                continue
            for index, request in enumerate(events):
                await self._take_room()
                self._start(self._score(number, index, request, started))

    def _start(self, scoring: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(scoring)
        self._scoring.add(task)
        task.add_done_callback(self._scoring.discard)

    async def _take_room(self) -> None:
        await self._room.acquire()  # NOTE: at the cap, the stream is not read: flow control holds the sender
        self._held += 1

    async def _score(self, number: int, index: int, request: pb.ScoreRequest, started: float) -> None:
        try:
            ready = await self._answer(number, index, request, started)
        except Exception:  # NOTE: a fault of ours still answers the event: else its room is never freed
            log.exception("gRPC ScoreStream: an event failed")
            ready = (number, index, request.id, "", None, error_of(ScoringError("internal error")))
        self._put([ready])

    async def _answer(self, number: int, index: int, request: pb.ScoreRequest, started: float) -> Ready:
        try:
            scored = await score_event(self._core, request, self._limits, started)
        except ScoringError as exc:
            log_answered(exc, "grpc", method="ScoreStream")
            return (number, index, request.id, event_id_of(request.event, self._limits), None, error_of(exc))
        return (number, index, request.id, scored.event_id, encode(scored), None)

    async def _score_message(self, number: int, first: int, events: Sequence[pb.ScoreRequest]) -> None:
        """Events `first`.. of a message of several for one model, none asking `explain`: scored together, as
        `/api/score/batch` scores its items (one admission slot, one feature read per user, one cache
        lookup and one model run a chunk), each answered in its own slot, all in one response."""
        try:
            ready = await self._answer_message(number, first, events)
        except Exception:  # NOTE: a fault of ours still answers its events: else their room is never freed
            log.exception("gRPC ScoreStream: a message failed")
            failed = error_of(ScoringError("internal error"))
            ready = [(number, index, request.id, "", None, failed) for index, request in enumerate(events, first)]
        self._put(ready)

    async def _answer_message(self, number: int, first: int, events: Sequence[pb.ScoreRequest]) -> list[Ready]:
        items = [decoded(request, self._limits) for request in events]
        try:
            answers = await self._core.score_events(items, events[0].model or None)
        except ScoringError as exc:  # the message as a whole: refused by admission, no such model...
            answers = [exc] * len(events)
        ready: list[Ready] = []
        for index, (request, answer) in enumerate(zip(events, answers, strict=True), first):
            if isinstance(answer, ScoringError):
                log_answered(answer, "grpc", method="ScoreStream")
                event_id = event_id_of(request.event, self._limits)
                ready.append((number, index, request.id, event_id, None, error_of(answer)))
            else:
                ready.append((number, index, request.id, answer.event_id, encode(answer), None))
        return ready

    def _refused(self, number: int, index: int, id_: str, event_id: str, exc: ScoringError) -> None:
        log_answered(exc, "grpc", method="ScoreStream")
        self._put([(number, index, id_, event_id, None, error_of(exc))])

    def _put(self, ready: list[Ready]) -> None:
        """Answers made, for the writer. The stream moved: what was read is answered (a message read
        is scored or refused in the step that read it, so this is also the read's mark)."""
        self._ready.extend(ready)
        self._moved = time.monotonic()
        self._wake.set()

    async def _write(self, reader: asyncio.Future[None]) -> None:
        """Answers as they are ready, all those ready in one message; a written answer frees its room.
        Stops at its next turn once the stream is ended idle (`_end_idle`)."""
        while not self._ending:
            if self._ready:
                ready, self._ready = self._ready, []
                await self._context.write(_response(ready))
                self._moved = time.monotonic()
                self._held -= len(ready)
                for _ in ready:
                    self._room.release()
            elif reader.done() and (not self._held or reader.cancelled() or reader.exception() is not None):
                reader.result()  # NOTE: the read's own failure (the transport's) ends the call with it
                return
            else:
                self._wake.clear()
                await self._wake.wait()


def _together(events: Sequence[pb.ScoreRequest]) -> bool:
    """Whether a message's events can be scored as one batch: one model, and no `explain` (reason
    codes are the single-event path's)."""
    model = events[0].model
    return all(e.model == model and not e.explain for e in events)


def _response(ready: list[Ready]) -> pb.ScoreStreamResponse:
    response = pb.ScoreStreamResponse()
    add = response.answers.add
    for number, index, id_, event_id, scored, error in ready:
        if error is None:
            add(message=number, index=index, id=id_, event_id=event_id, scored=scored)
        else:
            add(message=number, index=index, id=id_, event_id=event_id, error=error)
    return response
