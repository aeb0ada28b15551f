"""`fraud.scoring.v1.Scoring` in process, over the real core and a real grpc.aio server and client:
`Score` answers what the core's single-event entry answers (the HTTP route's), errors keep their
codes, and `ScoreStream` holds up against hostile clients (bad messages interleaved, a client that
does not read, half-closed streams, no key, a message over the transport's cap)."""

from __future__ import annotations

import asyncio
import json
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest

from shared.adapters.oip.jobs import grpc_server
from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.client import answer_line, score_stream, scores
from shared.core.holder import ServiceHolder
from shared.core.service import ScoringService
from shared.domain.answers import encode
from shared.settings import AdmissionPolicy, Settings
from tests.adapters.scoring_grpc.streams import answers_of, body, decided, message, raw_score, raw_stream, write_all
from tests.conftest import closed_port

KEY = "k" * 24
REPO = Path(__file__).resolve().parents[3]
Served = Callable[..., Awaitable[tuple[ScoringService, grpc.aio.Channel]]]


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[Served]:
    """`await served(**changes)`: the core with its gRPC server on loopback, and a channel to it."""
    opened: list[tuple[ServiceHolder, grpc.aio.Channel]] = []

    async def serve(**changes: Any) -> tuple[ScoringService, grpc.aio.Channel]:
        port = closed_port()
        holder = ServiceHolder(
            lambda: replace(settings, grpc_port=port, **changes), on_built=[grpc_server("127.0.0.1")]
        )
        service = await holder.get()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        opened.append((holder, channel))
        await asyncio.wait_for(channel.channel_ready(), 10)
        return service, channel

    yield serve
    for holder, channel in opened:
        await channel.close()
        await holder.aclose()


# -- Score ------------------------------------------------------------------------------


async def test_score_answers_what_the_cores_single_event_entry_answers(served: Served) -> None:
    service, channel = await served()
    expected = encode(await service.score_json(body(event_id="same")))
    [got] = [line async for line in scores(channel, [body(event_id="same")])]
    assert decided(got.encode()) == decided(expected)


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (pb.ScoreRequest(event=b"{not json").SerializeToString(), grpc.StatusCode.INVALID_ARGUMENT, "malformed_json"),
        (pb.ScoreRequest(event=body(amount=-1)).SerializeToString(), grpc.StatusCode.INVALID_ARGUMENT, "invalid_event"),
        (
            pb.ScoreRequest(event=b" " * 70_000).SerializeToString(),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "payload_too_large",
        ),
        (pb.ScoreRequest(event=body(), model="nope").SerializeToString(), grpc.StatusCode.NOT_FOUND, "model_not_found"),
        (b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "bad_request"),  # no ScoreRequest
    ],
    ids=["malformed", "invalid", "too-large", "no-model", "undecodable"],
)
async def test_score_refuses_with_the_status_its_error_names_and_https_code(
    served: Served, request_bytes: bytes, status: grpc.StatusCode, code: str
) -> None:
    _, channel = await served()
    call = raw_score(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(request_bytes, timeout=10)
    assert refused.value.code() == status
    assert dict(refused.value.trailing_metadata() or ())["x-error-code"] == code


# -- ScoreStream: bad input is answered, the stream stays open --------------------------


async def test_bad_messages_interleaved_are_each_answered_and_the_stream_goes_on(served: Served) -> None:
    _, channel = await served(max_batch_items=4)
    call = raw_stream(channel)
    sent = [
        (message(body(event_id="g0")), None),
        (b"\xff\xff\xff", "bad_request"),  # undecodable
        (message(b"{not json"), "malformed_json"),
        (message(body(event_id="g1"), body(event_id="bad", amount=-1)), "invalid_event"),
        (message(b" " * 70_000), "payload_too_large"),  # an event over MAX_BODY_BYTES, the message under the cap
        (message(*[body(event_id=f"m{i}") for i in range(5)]), "too_many_items"),  # over MAX_BATCH_ITEMS
        (pb.ScoreStreamRequest().SerializeToString(), "bad_request"),  # no event
        (message(body(event_id="g2"), model="nope"), "model_not_found"),
        (message(b'{"event_id": "\\u00dd\xa2", "x'), "malformed_json"),  # no UTF-8 inside a string
        (message(b'{"a":' * 12_000), "malformed_json"),  # nested past the parser's depth
        (message(body(event_id="g3")), None),
    ]
    for raw, _ in sent:
        await call.write(raw)
    answers = await answers_of(call, 12)
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    errors = {(a.message, a.index): a.error.code for a in answers if a.WhichOneof("outcome") == "error"}
    assert errors == {(1, -1): "bad_request", (2, 0): "malformed_json", (3, 1): "invalid_event",
                      (4, 0): "payload_too_large", (5, -1): "too_many_items", (6, -1): "bad_request",
                      (7, 0): "model_not_found", (8, 0): "malformed_json", (9, 0): "malformed_json"}  # fmt: skip
    scored = {a.event_id for a in answers if a.WhichOneof("outcome") == "scored"}
    assert scored == {"g0", "g1", "g3"}
    invalid = next(a for a in answers if (a.message, a.index) == (3, 1))
    assert (invalid.event_id, invalid.id, invalid.error.status, invalid.error.grpc_status) == (
        "bad", "e1", 422, "INVALID_ARGUMENT"
    )  # fmt: skip


async def test_a_message_over_the_transports_cap_ends_the_stream(served: Served) -> None:
    """The one bad message the service never sees: the transport refuses it (16 x MAX_BODY_BYTES)."""
    service, channel = await served()
    call = raw_stream(channel)
    await call.write(message(*[b" " * 60_000] * 20))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await call.read()
    assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert service.settings.max_body_bytes * 16 < 60_000 * 20


# -- ScoreStream: hostile clients -------------------------------------------------------


@pytest.mark.parametrize("key", [None, "w" * 24], ids=["no-key", "wrong-key"])
async def test_a_stream_without_a_valid_key_is_refused_and_ends(served: Served, key: str | None) -> None:
    _, channel = await served(grpc_keys=KEY)
    call = raw_stream(channel, (("x-api-key", key),) if key else ())
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await asyncio.wait_for(call.read(), 10)  # NOTE: refused from its metadata alone, before any message
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(asyncio.InvalidStateError):  # NOTE: ended: a message after the refusal is never sent
        await call.write(message(body()))
    keyed = [a async for a in score_stream(channel, [body()], key=KEY)]
    assert [a.WhichOneof("outcome") for a in keyed] == ["scored"]


async def test_a_half_closed_stream_gets_every_pending_answer_then_ends_ok(served: Served) -> None:
    """Every message still waits for admission (another caller holds its one slot; a message of
    several events takes one slot, as a batch does) when the client half-closes and the read ends:
    the answers come after, then the end."""
    one_at_a_time = AdmissionPolicy(max_inflight=1, max_queued=256, max_queue_wait_ms=10_000, queue_target_ms=10_000)
    service, channel = await served(grpc_stream_max_in_flight=256, admission=one_at_a_time)
    call = raw_stream(channel)
    async with service.admission.admitted():  # NOTE: the slot every event waits for
        await write_all(call, [message(*[body(event_id=f"h{m}-{i}") for i in range(20)]) for m in range(10)])
        for _ in range(100):
            if service.admission.waiting == 10:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # NOTE: the half-close reaches the server: its read ends
        assert service.admission.waiting == 10
    answers = await answers_of(call, 200)
    assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    assert sorted(a.event_id for a in answers) == sorted(f"h{m}-{i}" for m in range(10) for i in range(20))
    assert {(a.message, a.index) for a in answers} == {(m, i) for m in range(10) for i in range(20)}


async def test_a_client_that_does_not_read_stops_its_own_stream_at_the_cap(served: Served) -> None:
    """The server scores no more than the stream's cap ahead of what the client's transport took
    (its flow-control window: 64 KiB here, BDP probing off): the rest waits unread, not scored."""
    service, _ = await served(grpc_stream_max_in_flight=4)
    port = service.settings.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)]) as channel:
        call = raw_stream(channel)
        sent = 3000
        writer = asyncio.create_task(write_all(call, [message(body(event_id=f"s{i}")) for i in range(sent)]))
        await asyncio.sleep(1.5)
        held = service.admission.total_admitted
        await asyncio.sleep(1.0)
        assert service.admission.total_admitted == held, "the server kept scoring for a client that reads nothing"
        assert held < 400, f"{held} events scored for a client that took 64 KiB of answers"
        answers = await answers_of(call, sent)  # now read: every event is answered
        await writer
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
        assert len({a.event_id for a in answers}) == sent


async def test_ten_thousand_messages_on_one_stream_are_all_answered(served: Served) -> None:
    service, channel = await served()
    before = service.admission.total_admitted
    bodies = [body(event_id=f"t{i}", amount=float(i % 500)) for i in range(10_000)]
    answers = [a async for a in score_stream(channel, bodies)]
    assert len(answers) == 10_000
    assert sorted(int(a.id) for a in answers) == list(range(10_000))
    assert {a.event_id for a in answers} == {f"t{i}" for i in range(10_000)}
    assert all(a.WhichOneof("outcome") == "scored" for a in answers), {answer_line(a) for a in answers[:3]}
    assert service.admission.total_admitted - before == 10_000
    decisions = {msgspec.json.decode(a.scored)["decision"] for a in answers}
    assert decisions <= {"approve", "review", "decline"}


@pytest.mark.parametrize("mode", [[], ["--stream"]], ids=["score", "stream"])
async def test_the_client_example_prints_one_answer_a_line(served: Served, mode: list[str]) -> None:
    """`python -m shared.adapters.scoring_grpc.client` (docs/api.md): events on stdin, answers out."""
    service, _ = await served(grpc_keys=KEY)
    lines = b"\n".join([body(event_id="c1"), b"{not json", body(event_id="c2")]) + b"\n"
    argv = ["-m", "shared.adapters.scoring_grpc.client", "--target", f"127.0.0.1:{service.settings.grpc_port}"]
    child = await asyncio.create_subprocess_exec(
        sys.executable, *argv, "--key", KEY, *mode, stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=REPO
    )
    out, err = await asyncio.wait_for(child.communicate(lines), 60)
    assert child.returncode == 0, err.decode()[-2000:]
    answers = [json.loads(line) for line in out.decode().splitlines()]
    assert sorted(a.get("event_id", "") for a in answers if "decision" in a) == ["c1", "c2"]
    assert [a["error"] for a in answers if "error" in a] == ["malformed_json"]


async def test_a_message_larger_than_the_stream_cap_is_scored_in_parts_and_answered_whole(served: Served) -> None:
    """A message of several events is scored together (one admission slot a part), in parts of at
    most the stream's cap: a message of 10 on a stream of 4 is answered in full, each event in its
    place, with what the single-event path answers for the same event."""
    service, channel = await served(grpc_stream_max_in_flight=4)
    bodies = [body(event_id=f"p{i}", amount=10.0 + i) for i in range(10)]
    call = raw_stream(channel)
    await write_all(call, [message(*bodies)])
    answers = await answers_of(call, 10)
    assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    assert sorted(a.index for a in answers) == list(range(10))
    assert service.admission.total_admitted == 3  # NOTE: parts of 4, 4 and 2, each one slot
    for a in sorted(answers, key=lambda a: a.index):
        alone = await service.score_json(bodies[a.index])
        assert decided(a.scored) == decided(encode(alone)), a.index


# -- ScoreStream: the idle limit --------------------------------------------------------

IDLE_MS = 400


async def ended_idle(call: Any, wait_s: float = 10) -> None:
    """The call ends DEADLINE_EXCEEDED with `stream_idle` in its trailing metadata."""
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        while (await asyncio.wait_for(call.read(), wait_s)) is not grpc.aio.EOF:
            pass
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, ended.value
    assert ("x-error-code", "stream_idle") in tuple(ended.value.trailing_metadata() or ()), ended.value


async def test_a_silent_stream_is_ended_at_its_idle_limit_and_gives_its_call_slot_back(served: Served) -> None:
    """One call slot: a stream opened and never written holds it until the idle limit (another
    connection's call is refused), then the slot serves the next caller."""
    service, channel = await served(grpc_stream_idle_ms=IDLE_MS, grpc_max_concurrent=1)
    silent = raw_stream(channel)
    await asyncio.sleep(0.1)
    target, own = f"127.0.0.1:{service.settings.grpc_port}", [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(target, options=own) as other:  # NOTE: a connection of its own
        score = raw_score(other)
        request = pb.ScoreRequest(event=body()).SerializeToString()
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # NOTE: the silent stream holds the one slot
            await asyncio.wait_for(score(request), 10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        started = asyncio.get_running_loop().time()
        await ended_idle(silent)
        assert asyncio.get_running_loop().time() - started < IDLE_MS / 1000 + 2
        answer = await asyncio.wait_for(score(request), 10)
        assert decided(answer.scored)["decision"] in {"approve", "review", "decline"}


async def test_a_client_that_stops_reading_is_ended_at_the_idle_limit(served: Served) -> None:
    """It sends until the stream's cap holds it and never reads: past the limit the server stops
    reading and scoring; when the client reads again it gets what was written, then the end."""
    service, _ = await served(grpc_stream_idle_ms=IDLE_MS, grpc_stream_max_in_flight=4)
    port = service.settings.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)]) as channel:
        call = raw_stream(channel)
        writer = asyncio.create_task(write_all(call, [message(body(event_id=f"r{i}")) for i in range(3000)]))
        await asyncio.sleep(IDLE_MS / 1000 + 1.5)
        scored = service.admission.total_admitted
        assert 0 < scored < 400
        await ended_idle(call)
        assert service.admission.total_admitted == scored, "the server read on past the idle limit"
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)


async def test_a_stream_that_keeps_sending_is_not_idle(served: Served) -> None:
    """A message every half of the limit, for three limits: each is answered, the stream ends OK."""
    _, channel = await served(grpc_stream_idle_ms=IDLE_MS)
    call = raw_stream(channel)
    for i in range(6):
        await call.write(message(body(event_id=f"k{i}")))
        [answer] = await answers_of(call, 1)
        assert answer.WhichOneof("outcome") == "scored"
        await asyncio.sleep(IDLE_MS / 2000)
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK


async def unread(service: ScoringService, channel: grpc.aio.Channel, events: int) -> Any:
    """A stream sent `events` it has not read the answers of: all scored, its window full, the rest waiting."""
    call = raw_stream(channel)
    for i in range(events):
        await call.write(message(body(event_id=f"u{i}")))
    for _ in range(500):
        if service.admission.total_admitted >= events:
            break
        await asyncio.sleep(0.02)
    assert service.admission.total_admitted == events
    return call


async def test_a_client_that_sends_without_reading_is_not_idle(served: Served) -> None:
    """Its window is full (no answer can be written) but each message it sends is answered: it moves."""
    service, _ = await served(grpc_stream_idle_ms=IDLE_MS, grpc_stream_max_in_flight=4096)
    port = service.settings.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)]) as channel:
        call = await unread(service, channel, 1500)
        for _ in range(9):
            await call.write(b"\xff")  # NOTE: answered (refused) as soon as read, never written: the window is full
            await asyncio.sleep(IDLE_MS / 3000)
        assert not call.done(), "a stream that sends was ended as idle"
        await call.done_writing()
        answers = await answers_of(call, 1509)
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
        assert sum(a.index == -1 for a in answers) == 9


async def test_a_client_that_reads_slowly_is_not_idle(served: Served) -> None:
    """It sends nothing more, and takes its answers late: part of them 0.4 of the limit after the
    last was made (which lets a held write through), the rest 1.2 limits after. A write the client
    lets through moves the stream: it is not ended, and every answer comes, then OK."""
    idle_ms = 2000
    service, _ = await served(grpc_stream_idle_ms=idle_ms, grpc_stream_max_in_flight=4096)
    port = service.settings.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.http2.bdp_probe", 0)]) as channel:
        call = await unread(service, channel, 1500)  # NOTE: ~230 answers fill its window, the rest wait in one write
        await call.done_writing()
        await asyncio.sleep(0.4 * idle_ms / 1000)
        taken = [a for _ in range(200) for a in (await asyncio.wait_for(call.read(), 10)).answers]
        assert len(taken) < 1500, "the client took every answer at once: no write was held"
        await asyncio.sleep(0.8 * idle_ms / 1000)
        rest = await answers_of(call, 1500 - len(taken))
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
        assert len({a.event_id for a in taken + rest}) == 1500


async def test_events_waiting_on_the_server_are_not_the_clients_idleness(served: Served) -> None:
    """Events held by admission for three idle limits: the wait is the server's, the stream is kept
    and every event is answered when the slot frees."""
    one_at_a_time = AdmissionPolicy(max_inflight=1, max_queued=64, max_queue_wait_ms=10_000, queue_target_ms=10_000)
    service, channel = await served(grpc_stream_idle_ms=IDLE_MS, admission=one_at_a_time)
    call = raw_stream(channel)
    async with service.admission.admitted():  # NOTE: the slot the stream's events wait for
        await call.write(message(*[body(event_id=f"w{i}") for i in range(3)]))
        await asyncio.sleep(3 * IDLE_MS / 1000)
        assert not call.done(), "a stream whose events wait on admission was ended as idle"
    answers = await answers_of(call, 3)
    assert sorted(a.event_id for a in answers) == ["w0", "w1", "w2"]
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK


async def test_a_stream_lives_at_most_its_connections_age_and_grace(served: Served) -> None:
    """A stream on a connection asked to go (GRPC_MAX_CONNECTION_AGE_MS) may run its grace, then is
    cut UNAVAILABLE: what it was answered before stays answered; a gateway resends the rest on a
    new stream (docs/api.md)."""
    _, channel = await served(grpc_max_connection_age_ms=1000, grpc_max_connection_age_grace_ms=1000)
    call = raw_stream(channel)
    started, answered = asyncio.get_running_loop().time(), []
    with pytest.raises((grpc.aio.AioRpcError, asyncio.InvalidStateError)):  # NOTE: a write or a read meets the cut
        for i in range(50):
            await call.write(message(body(event_id=f"g{i}")))
            answered.extend(await answers_of(call, 1))
            await asyncio.sleep(0.1)
    lived = asyncio.get_running_loop().time() - started
    assert await call.code() == grpc.StatusCode.UNAVAILABLE, await call.details()
    assert 1.5 < lived < 4.0, lived  # NOTE: the age is jittered ±10%, the grace is whole
    assert [a.event_id for a in answered] == [f"g{i}" for i in range(len(answered))]


# -- the client example: a gateway's stream, reopened ---------------------------------------


async def paced(bodies: list[bytes], every_s: float) -> AsyncIterator[bytes]:
    """A gateway's feed: one event every `every_s`."""
    for b in bodies:
        yield b
        await asyncio.sleep(every_s)


async def test_the_client_reopens_a_cut_stream_and_sends_what_was_unanswered(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A feed that outlives its connection (1 s of age, 0.5 s of grace, 4 s of events), with the
    events of the second half-second onwards held by admission until 2.3 s: the cut (~1.5 s) leaves
    events unanswered; the client reopens the stream and sends them again. Every event is
    answered once, as itself."""
    one_at_a_time = AdmissionPolicy(max_inflight=1, max_queued=256, max_queue_wait_ms=10_000, queue_target_ms=10_000)
    service, channel = await served(
        grpc_max_connection_age_ms=1000, grpc_max_connection_age_grace_ms=500, admission=one_at_a_time
    )
    bodies = [body(event_id=f"f{i}") for i in range(40)]

    async def hold() -> None:
        await asyncio.sleep(0.5)
        async with service.admission.admitted():  # NOTE: what is sent now waits, past the cut
            await asyncio.sleep(1.8)  # NOTE: inside REQUEST_TIMEOUT_MS (2 s), which bounds the holder too

    holding = asyncio.create_task(hold())
    with caplog.at_level("WARNING", logger="shared.adapters.scoring_grpc.client"):
        answers = [a async for a in score_stream(channel, paced(bodies, 0.1), per_message=4)]
    await holding
    reopened = [r.getMessage() for r in caplog.records if "reopening" in r.getMessage()]
    assert reopened and not reopened[0].endswith(" 0 unanswered"), reopened  # NOTE: the cut left events to resend
    assert sorted(int(a.id) for a in answers) == list(range(40))
    assert all(a.event_id == f"f{a.id}" and a.WhichOneof("outcome") == "scored" for a in answers)


async def test_the_client_opens_the_next_stream_with_the_next_event_after_an_idle_end(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """A feed that pauses past the idle limit: the stream ends `stream_idle` and the next opens with
    the next event, none lost."""
    _, channel = await served(grpc_stream_idle_ms=IDLE_MS)

    async def pausing() -> AsyncIterator[bytes]:
        yield body(event_id="p0")
        await asyncio.sleep(3 * IDLE_MS / 1000)
        yield body(event_id="p1")

    with caplog.at_level("WARNING", logger="shared.adapters.scoring_grpc.client"):
        answers = [a async for a in score_stream(channel, pausing())]
    assert [a.event_id for a in answers] == ["p0", "p1"]
    assert [r.getMessage() for r in caplog.records if "reopening" in r.getMessage()] == [
        "ScoreStream ended (DEADLINE_EXCEEDED): reopening with 0 unanswered"
    ]


async def test_the_client_does_not_reopen_a_refused_stream(served: Served) -> None:
    _, channel = await served(grpc_keys=KEY)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        [a async for a in score_stream(channel, [body()], key="w" * 24)]
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_client_that_stops_reading_holds_its_slot_at_most_its_connections_age(served: Served) -> None:
    """The idle end cannot pass its unread answers, so the call stays; the connection's age closes
    it (1 s of age, 0.5 s of grace here): the one call slot then serves another connection."""
    service, _ = await served(
        grpc_stream_idle_ms=IDLE_MS,
        grpc_stream_max_in_flight=4,
        grpc_max_concurrent=1,
        grpc_max_connection_age_ms=1000,
        grpc_max_connection_age_grace_ms=500,
    )
    target = f"127.0.0.1:{service.settings.grpc_port}"
    own = [("grpc.use_local_subchannel_pool", 1), ("grpc.http2.bdp_probe", 0)]
    request = pb.ScoreRequest(event=body()).SerializeToString()
    async with (
        grpc.aio.insecure_channel(target, options=own) as reader,
        grpc.aio.insecure_channel(target, options=own) as other,
    ):
        call = raw_stream(reader)
        writer = asyncio.create_task(write_all(call, [message(body(event_id=f"n{i}")) for i in range(3000)]))
        await asyncio.sleep(0.3)
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # NOTE: the non-reader holds the one slot
            await asyncio.wait_for(raw_score(other)(request), 10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await asyncio.sleep(1.1 + 0.5 + 0.6)  # NOTE: the age (±10 %), its grace, and time to close
        answer = await asyncio.wait_for(raw_score(other)(request), 10)
        assert decided(answer.scored)["decision"] in {"approve", "review", "decline"}
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
