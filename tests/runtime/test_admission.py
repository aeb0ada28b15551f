"""Admission control: a bounded wait for a slot past MAX_INFLIGHT, a 503 with Retry-After past it, work dropped
past REQUEST_TIMEOUT_MS."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import numpy as np
import pytest
from msgspec import to_builtins

from bench.llm_server import LlmServer
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.core.service import ScoringService
from shared.errors import DeadlineExceeded, Overloaded
from shared.runtime.admission import INTERVAL_S, Admission
from shared.settings import AdmissionPolicy, ReviewPolicy, Settings
from tests.adapters.http.openapi_check import answer_problems
from tests.conftest import event

V2_BODY = {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [0.0] * 4}]}


# -- the object ----------------------------------------------------------------------------


def _admission(**policy: float) -> Admission:
    return Admission(AdmissionPolicy(**policy))  # type: ignore[arg-type]


async def _holding(admission: Admission, n: int) -> None:
    for _ in range(n):
        await admission.take()


async def test_a_request_past_the_slots_waits_its_turn_instead_of_being_refused() -> None:
    admission = _admission(max_inflight=2, max_queue_wait_ms=5000)
    await _holding(admission, 2)
    third = asyncio.create_task(admission.take())
    await asyncio.sleep(0.01)
    assert not third.done() and admission.waiting == 1
    admission.leave()  # NOTE: the slot passes to the waiter: still two in the work
    await third
    assert admission.inflight == 2 and admission.waiting == 0
    assert to_builtins(admission.stats()).items() >= {"admitted": 3, "waited": 1, "shed": 0}.items()
    assert admission.problem() == ""


async def test_a_wait_past_max_queue_wait_is_refused_with_retry_after() -> None:
    admission = _admission(max_inflight=1, max_queue_wait_ms=20, queue_target_ms=20)
    await admission.take()
    started = time.monotonic()
    with pytest.raises(Overloaded) as refused:
        await admission.take()
    assert time.monotonic() - started >= 0.019
    assert refused.value.status == 503 and refused.value.retry_after_s == 1.0
    assert "no slot within 20 ms" in refused.value.detail and "MAX_INFLIGHT 1" in refused.value.detail
    assert admission.shed == 1 and admission.waiting == 0 and admission.problem().startswith("overloaded")
    admission.leave()
    assert admission.inflight == 0


async def test_past_max_queued_an_arrival_is_refused_at_once() -> None:
    admission = _admission(max_inflight=1, max_queued=2, max_queue_wait_ms=5000)
    await admission.take()
    waiting = [asyncio.create_task(admission.take()) for _ in range(2)]
    await asyncio.sleep(0)
    assert admission.refuses() and admission.shed == 1
    with pytest.raises(Overloaded, match="MAX_QUEUED 2"):
        await admission.take()
    for _ in waiting:
        admission.leave()
    await asyncio.gather(*waiting)
    assert admission.inflight == 1 and admission.shed == 2


async def test_a_standing_queue_cuts_the_wait_to_the_target() -> None:
    """Waits past QUEUE_TARGET_MS over a whole interval of hand-overs are overload, not a burst: from
    then on a newcomer may wait at most QUEUE_TARGET_MS, until the queue empties."""
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000, queue_target_ms=50)
    await admission.take()
    first, second, third = (asyncio.create_task(admission.take()) for _ in range(3))
    await asyncio.sleep(0.06)
    admission.leave()  # NOTE: `first` waited past the target: the interval starts
    await first
    assert not admission.standing(), "one late hand-over is a burst"
    await asyncio.sleep(INTERVAL_S * 1.2)
    assert not admission.standing(), "time alone does not make a queue stand: a hand-over does"
    admission.leave()  # NOTE: `second` waited past the target too, a whole interval later
    await second
    assert admission.standing()
    started = time.monotonic()
    with pytest.raises(Overloaded):
        await admission.take()
    assert time.monotonic() - started < 5, "refused within the target, not after MAX_QUEUE_WAIT_MS"
    assert not third.done(), "who waits already keeps the wait it was given"
    admission.leave()
    await third
    assert not admission.standing(), "an empty queue stands no more"
    late = asyncio.create_task(admission.take())
    await asyncio.sleep(0.06)
    assert not late.done(), "the full wait is back"
    admission.leave()
    await late
    admission.leave()
    assert admission.inflight == 0 and admission.shed == 1


async def test_a_standing_queue_that_cannot_drain_in_time_refuses_at_arrival() -> None:
    """While the queue stands, the wait a newcomer would have (the waiters ahead times the interval
    between slots freed) over QUEUE_TARGET_MS: refused at once, before any wait."""
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000, queue_target_ms=20)
    await admission.take()
    backlog = [asyncio.create_task(admission.take()) for _ in range(14)]
    await asyncio.sleep(0)
    for _ in range(10):  # NOTE: slots freed 15 ms apart or more: the waits pass 20 ms for over 100 ms
        await asyncio.sleep(0.015)
        admission.leave()
    await asyncio.gather(*backlog[:10])
    assert admission.standing()
    arrivals = [asyncio.create_task(admission.take()) for _ in range(10)]
    await asyncio.sleep(0)
    assert all(a.done() and isinstance(a.exception(), Overloaded) for a in arrivals)
    assert "ms apart" in str(arrivals[0].exception())
    assert admission.waiting == 4 and admission.shed == 10
    for _ in range(admission.waiting):
        admission.leave()
    await asyncio.gather(*backlog, *arrivals, return_exceptions=True)
    admission.leave()
    assert admission.inflight == 0


async def test_one_stall_before_the_queue_stands_refuses_nobody_at_arrival() -> None:
    """A slot freed late (a GC pause, a neighbour) is one sample, not a standing queue."""
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000, queue_target_ms=5)
    await admission.take()
    first = asyncio.create_task(admission.take())
    await asyncio.sleep(0.05)  # NOTE: a 50 ms stall, ten times the target
    second = asyncio.create_task(admission.take())
    admission.leave()
    await first
    arrivals = [asyncio.create_task(admission.take()) for _ in range(20)]
    await asyncio.sleep(0)
    assert not any(a.done() for a in arrivals) and admission.shed == 0
    for _ in range(21):
        admission.leave()
    await asyncio.gather(second, *arrivals)
    admission.leave()
    assert admission.inflight == 0 and admission.shed == 0


async def test_a_burst_that_drains_refuses_nothing() -> None:
    admission = _admission(max_inflight=4, max_queued=256, max_queue_wait_ms=10_000)

    async def request() -> None:
        async with admission.admitted():
            await asyncio.sleep(0.001)

    await asyncio.gather(*(request() for _ in range(200)))
    assert admission.shed == 0 and admission.total_admitted == 200 and admission.waited > 0
    assert admission.inflight == 0 and admission.waiting == 0


async def test_a_waiter_cancelled_from_outside_leaves_the_queue_and_the_slot_passes_on() -> None:
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000)
    await admission.take()
    gone = asyncio.create_task(admission.take())
    after = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert admission.waiting == 1
    admission.leave()
    await after
    assert gone.cancelled() and admission.inflight == 1
    admission.leave()
    assert admission.inflight == 0


async def test_a_slot_freed_in_the_tick_a_waiter_is_cancelled_goes_to_the_next_waiter() -> None:
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000)
    await admission.take()
    gone = asyncio.create_task(admission.take())
    after = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    gone.cancel()  # NOTE: no yield before the slot is freed: `gone` is still in the queue
    admission.leave()
    await after
    assert gone.cancelled() and admission.inflight == 1 and admission.waiting == 0
    admission.leave()
    assert admission.inflight == 0


async def test_a_stale_estimate_never_refuses_the_first_in_line() -> None:
    """Slow work frees slots far apart; once the queue empties, the first to find the slots full waits."""
    admission = _admission(max_inflight=1, max_queue_wait_ms=20, queue_target_ms=20)
    await admission.take()
    slow = asyncio.create_task(admission.take())
    await asyncio.sleep(0.01)
    admission.leave()  # NOTE: a slot freed after 10 ms (an estimate the next waiters are judged by)
    await slow
    first = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    assert not first.done(), "it waits: nobody is ahead of it"
    admission.leave()
    await first
    admission.leave()
    assert admission.inflight == 0 and admission.shed == 0


async def test_a_waiter_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    admission = _admission(max_inflight=1, max_queue_wait_ms=10_000)
    await admission.take()
    cancelled = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    admission.leave()  # NOTE: the slot is handed over, and in the same tick the waiter is cancelled
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert admission.inflight == 0 and admission.waiting == 0


def test_a_limit_of_zero_is_no_cap() -> None:
    admission = _admission(max_inflight=0)
    for _ in range(10_000):
        assert not admission.refuses()
    assert admission.shed == 0 and admission.problem() == ""


async def test_work_past_its_deadline_is_cancelled_and_told() -> None:
    admission = _admission(max_inflight=4, request_timeout_ms=50)
    finished = False

    async def slow() -> None:
        nonlocal finished
        async with admission.admitted():
            await asyncio.sleep(5)
        finished = True

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as late:
        await slow()
    assert time.monotonic() - started < 4.0 and not finished  # NOTE: the work would take 5 s
    assert late.value.grpc_status == "DEADLINE_EXCEEDED" and late.value.retry_after_s == 1.0
    assert admission.timed_out == 1 and admission.deadlines.armed == 0 and admission.inflight == 0
    async with admission.admitted():
        assert await asyncio.sleep(0, "on time") == "on time"


async def test_a_cancellation_that_is_not_the_deadline_stays_a_cancellation() -> None:
    admission = _admission(max_inflight=4, request_timeout_ms=5000)

    async def work() -> None:
        async with admission.admitted():
            await asyncio.sleep(5)

    task = asyncio.create_task(work())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert admission.timed_out == 0 and admission.deadlines.armed == 0 and admission.inflight == 0


# -- through the HTTP app --------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[LlmServer]:
    with LlmServer() as server:
        yield server


async def _app(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, ScoringService]]:
    holder = ServiceHolder(lambda: settings)
    transport = httpx.ASGITransport(app=create_app(holder))
    try:
        core = await holder.get()
        async with httpx.AsyncClient(transport=transport, base_url="http://app", timeout=10) as client:
            yield client, core
    finally:
        await holder.aclose()


@pytest.fixture
async def capped(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, ScoringService]]:
    """Two slots and no room to wait: the third request in the work is refused at once."""
    policy = AdmissionPolicy(max_inflight=2, max_queued=0)
    async for pair in _app(dataclasses.replace(settings, admission=policy)):
        yield pair


SCORING_ROUTES = [
    ("/api/score", event(note="")),
    ("/api/score/", event(note="")),
    ("/api/models/fraud/score", event(note="")),
    ("/api/score/batch", {"events": [event(note="")]}),
    ("/v2/models/fraud/infer", V2_BODY),
]


@pytest.mark.parametrize(("path", "body"), SCORING_ROUTES)
async def test_every_scoring_route_sheds_with_a_503_and_retry_after_when_full(
    capped: tuple[httpx.AsyncClient, ScoringService], path: str, body: object
) -> None:
    client, core = capped
    assert (await client.post(path, json=body)).status_code == 200
    await _holding(core.admission, 2)  # NOTE: two requests in the work (the public way in: as a request takes a slot)
    started = time.perf_counter()
    refused = await client.post(path, json=body)
    assert time.perf_counter() - started < 5, "refused, not held (MAX_QUEUED 0: no room to wait)"
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["error"] == "overloaded" if not path.startswith("/v2") else "MAX_QUEUED" in refused.text
    document = (await client.get("/api/openapi.json")).json()
    assert answer_problems(document, "POST", path, 503, refused.headers["content-type"], refused.content) == []
    ready = await client.get("/api/health/ready")
    assert ready.status_code == 200, "shedding is the replica doing its job: it stays in the pool"
    assert any(d.startswith("overloaded") for d in ready.json()["degraded"])
    core.admission.leave()
    assert (await client.post(path, json=body)).status_code == 200
    stats = (await client.get("/api/stats")).json()["admission"]
    assert stats["shed"] == 1 and stats["inflight"] == 1 and stats["max_inflight"] == 2


@pytest.mark.parametrize(("path", "body"), SCORING_ROUTES)
async def test_every_scoring_route_waits_for_a_slot_and_then_answers(
    settings: Settings, path: str, body: object
) -> None:
    policy = AdmissionPolicy(max_inflight=1, max_queue_wait_ms=10_000, queue_target_ms=10_000)
    async for client, core in _app(dataclasses.replace(settings, admission=policy)):
        await core.admission.take()
        answer = asyncio.create_task(client.post(path, json=body))
        for _ in range(5000):  # NOTE: until the request waits for its slot (bounded: 10 s)
            if core.admission.waiting or answer.done():
                break
            await asyncio.sleep(0.002)
        assert core.admission.waiting == 1, answer
        core.admission.leave()  # NOTE: the request in the work ends: the waiting one takes its slot
        assert (await answer).status_code == 200
        stats = (await client.get("/api/stats")).json()["admission"]
        assert stats["shed"] == 0 and stats["waited"] == 1 and stats["inflight"] == 0


async def test_refusals_show_in_the_metrics(capped: tuple[httpx.AsyncClient, ScoringService]) -> None:
    client, core = capped
    await _holding(core.admission, 2)
    for _ in range(3):
        assert (await client.post("/api/score", json=event())).status_code == 503
    text = (await client.get("/api/metrics")).text
    shed = [line for line in text.splitlines() if line.startswith("scoring_requests_shed_total")]
    assert shed and float(shed[0].rsplit(" ", 1)[1]) >= 3, text[:2000]


def _slow_review(settings: Settings, llm: LlmServer, **overrides: object) -> Settings:
    """Every event with a note held by a review that takes `llm.behaviour.delay_s`."""
    review = ReviewPolicy(
        endpoint=llm.endpoint, api_key="local-test-key", timeout_ms=3000.0, max_rps=1000.0, max_share=1.0
    )
    return dataclasses.replace(settings, review=review, **overrides)  # type: ignore[arg-type]


async def test_requests_in_the_work_hold_their_slots_and_the_next_waits_then_is_refused(
    settings: Settings, llm: LlmServer
) -> None:
    llm.behaviour.delay_s = 0.5
    policy = AdmissionPolicy(max_inflight=2, max_queue_wait_ms=50, queue_target_ms=50)
    async for client, core in _app(_slow_review(settings, llm, admission=policy)):
        held = [asyncio.create_task(client.post("/api/score", json=event(event_id=f"held-{i}"))) for i in range(2)]
        for _ in range(2000):  # NOTE: until both hold their slots (bounded: 10 s)
            if core.admission.inflight >= 2:
                break
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        refused = await client.post("/api/score", json=event(event_id="third"))
        assert refused.status_code == 503 and refused.json()["error"] == "overloaded"
        assert 0.049 <= time.perf_counter() - started < 5, "it waited MAX_QUEUE_WAIT_MS, not for the work"
        for answer in await asyncio.gather(*held):
            assert answer.status_code == 200 and answer.json()["review"]["status"] == "done"
        assert core.admission.inflight == 0


async def test_work_past_request_timeout_is_dropped_and_the_caller_told(settings: Settings, llm: LlmServer) -> None:
    llm.behaviour.delay_s = 4.0
    async for client, core in _app(_slow_review(settings, llm, admission=AdmissionPolicy(request_timeout_ms=200))):
        started = time.perf_counter()
        late = await client.post("/api/score", json=event(event_id="late"))
        waited = time.perf_counter() - started
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"] == "deadline_exceeded" and "REQUEST_TIMEOUT_MS (200 ms)" in late.json()["detail"]
        assert 0.15 < waited < 3.5, "answered at the deadline, not after the 4 s review"
        document = (await client.get("/api/openapi.json")).json()
        assert answer_problems(document, "POST", "/api/score", 503, late.headers["content-type"], late.content) == []
        assert core.admission.inflight == 0 and core.admission.timed_out == 1
        quick = await client.post("/api/score", json=event(event_id="quick", note="", amount=5.0))
        assert quick.status_code == 200, "the process serves on after dropping the late work"


async def test_the_batcher_queue_is_bounded(settings: Settings) -> None:
    """Past `max_queue` rows waiting for one version, a row is refused at once (V2 and the queue path too)."""
    tight = dataclasses.replace(settings, batch=dataclasses.replace(settings.batch, max_queue=8), max_batch_items=8)
    async for _, core in _app(tight):
        loaded = core.active()
        rows = [np.full(4, i, dtype=np.float32) for i in range(40)]
        done = await asyncio.gather(
            *(loaded.batcher.submit((f"k{i}", r)) for i, r in enumerate(rows)), return_exceptions=True
        )
        refused = [d for d in done if isinstance(d, Overloaded)]
        assert refused and len(refused) <= 40 - 8
        assert all(not isinstance(d, BaseException) for d in done if not isinstance(d, Overloaded)), done
        assert loaded.describe().shed == len(refused)


async def test_the_queue_path_waits_out_a_full_model_queue_instead_of_failing_the_batch(settings: Settings) -> None:
    """A message refused by a full model queue would fail its batch, be redelivered at once and, after
    maxDeliveryCount tries, dead-letter a valid payment: the queue path backs off and scores it."""
    from shared.adapters.queue.handler import QueueHandler
    from shared.adapters.queue.idempotency import MemoryResultStore
    from shared.adapters.queue.messages import Incoming
    from shared.adapters.queue.publisher import MemoryPublisher

    tight = dataclasses.replace(settings, batch=dataclasses.replace(settings.batch, max_queue=8), max_batch_items=8)
    async for _, core in _app(dataclasses.replace(tight, cache=dataclasses.replace(settings.cache, l1_size=0))):

        async def service(core: ScoringService = core) -> ScoringService:
            return core

        publisher = MemoryPublisher()
        handler = QueueHandler(service, MemoryResultStore(3600), publisher, max_message_bytes=65536)
        messages = [Incoming(f"m{i}", orjson_event(event_id=f"q{i}", amount=float(i) + 0.5)) for i in range(64)]
        verdicts = await handler.handle(messages)
        assert [v.outcome for v in verdicts] == ["completed"] * 64
        assert core.active().describe().shed > 0, "the model queue did refuse rows: the path waited them out"


def orjson_event(**overrides: object) -> bytes:
    import orjson

    return orjson.dumps(event(**overrides))
