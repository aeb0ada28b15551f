"""Admission control: a fast 503 with Retry-After past MAX_INFLIGHT, and work dropped past REQUEST_TIMEOUT_MS."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import numpy as np
import pytest

from bench.llm_server import LlmServer
from shared.admission import Admission
from shared.build import ServiceHolder
from shared.errors import DeadlineExceeded, Overloaded
from shared.http import create_app
from shared.service import ScoringService
from shared.settings import ReviewPolicy, Settings
from tests.conftest import event
from tests.openapi_check import answer_problems

V2_BODY = {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [0.0] * 4}]}


# -- the object ----------------------------------------------------------------------------


def test_past_the_limit_a_request_is_refused_at_once_and_a_leave_frees_a_slot() -> None:
    admission = Admission(limit=2, timeout_s=1.0)
    admission.enter()
    admission.enter()
    with pytest.raises(Overloaded) as refused:
        admission.enter()
    assert refused.value.status == 503 and refused.value.retry_after_s == 1.0
    assert "MAX_INFLIGHT 2" in refused.value.detail
    admission.leave()
    admission.enter()
    assert admission.describe().items() >= {"inflight": 2, "admitted": 3, "shed": 1}.items()
    assert admission.problem().startswith("overloaded")


def test_a_limit_of_zero_is_no_cap() -> None:
    admission = Admission(limit=0, timeout_s=1.0)
    for _ in range(10_000):
        admission.enter()
    assert admission.inflight == 10_000 and admission.shed == 0 and admission.problem() == ""


async def test_work_past_its_deadline_is_cancelled_and_told() -> None:
    admission = Admission(limit=4, timeout_s=0.05)
    finished = False

    async def slow() -> None:
        nonlocal finished
        await asyncio.sleep(5)
        finished = True

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as late:
        await admission.within(slow())
    assert time.monotonic() - started < 1.0 and not finished
    assert late.value.grpc_status == "DEADLINE_EXCEEDED" and late.value.retry_after_s == 1.0
    assert admission.timed_out == 1 and admission.deadlines.armed == 0
    assert await admission.within(asyncio.sleep(0, "on time")) == "on time"


async def test_a_cancellation_that_is_not_the_deadline_stays_a_cancellation() -> None:
    admission = Admission(limit=4, timeout_s=5.0)
    task = asyncio.create_task(admission.within(asyncio.sleep(5)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert admission.timed_out == 0 and admission.deadlines.armed == 0


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
    async for pair in _app(dataclasses.replace(settings, max_inflight=2)):
        yield pair


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/score", event(note="")),
        ("/api/score/", event(note="")),
        ("/api/models/fraud/score", event(note="")),
        ("/api/score/batch", {"events": [event(note="")]}),
        ("/v2/models/fraud/infer", V2_BODY),
    ],
)
async def test_every_scoring_route_sheds_with_a_503_and_retry_after_when_full(
    capped: tuple[httpx.AsyncClient, ScoringService], path: str, body: object
) -> None:
    client, core = capped
    assert (await client.post(path, json=body)).status_code == 200
    core.admission.enter()  # NOTE: two requests in the work (the public way in: as a request takes a slot)
    core.admission.enter()
    started = time.perf_counter()
    refused = await client.post(path, json=body)
    assert time.perf_counter() - started < 0.5
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["error"] == "overloaded" if not path.startswith("/v2") else "MAX_INFLIGHT" in refused.text
    document = (await client.get("/api/openapi.json")).json()
    assert answer_problems(document, "POST", path, 503, refused.headers["content-type"], refused.content) == []
    ready = await client.get("/api/health/ready")
    assert ready.status_code == 200, "shedding is the replica doing its job: it stays in the pool"
    assert any(d.startswith("overloaded") for d in ready.json()["degraded"])
    core.admission.leave()
    assert (await client.post(path, json=body)).status_code == 200
    stats = (await client.get("/api/stats")).json()["admission"]
    assert stats["shed"] == 1 and stats["inflight"] == 1 and stats["max_inflight"] == 2


async def test_refusals_show_in_the_metrics(capped: tuple[httpx.AsyncClient, ScoringService]) -> None:
    client, core = capped
    core.admission.enter()
    core.admission.enter()
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


async def test_requests_in_the_work_hold_their_slots_and_the_next_is_shed(settings: Settings, llm: LlmServer) -> None:
    llm.behaviour.delay_s = 0.5
    async for client, core in _app(_slow_review(settings, llm, max_inflight=2)):
        held = [asyncio.create_task(client.post("/api/score", json=event(event_id=f"held-{i}"))) for i in range(2)]
        while core.admission.inflight < 2:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        refused = await client.post("/api/score", json=event(event_id="third"))
        assert refused.status_code == 503 and refused.json()["error"] == "overloaded"
        assert time.perf_counter() - started < 0.3, "a refusal does not wait for the work in progress"
        for answer in await asyncio.gather(*held):
            assert answer.status_code == 200 and answer.json()["review"]["status"] == "done"
        assert core.admission.inflight == 0


async def test_work_past_request_timeout_is_dropped_and_the_caller_told(settings: Settings, llm: LlmServer) -> None:
    llm.behaviour.delay_s = 2.0
    async for client, core in _app(_slow_review(settings, llm, request_timeout_ms=200)):
        started = time.perf_counter()
        late = await client.post("/api/score", json=event(event_id="late"))
        waited = time.perf_counter() - started
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"] == "deadline_exceeded" and "REQUEST_TIMEOUT_MS (200 ms)" in late.json()["detail"]
        assert 0.15 < waited < 1.0
        document = (await client.get("/api/openapi.json")).json()
        assert answer_problems(document, "POST", "/api/score", 503, late.headers["content-type"], late.content) == []
        assert core.admission.inflight == 0 and core.admission.timed_out == 1
        quick = await client.post("/api/score", json=event(event_id="quick", note="", amount=5.0))
        assert quick.status_code == 200, "the process serves on after dropping the late work"


async def test_the_batcher_queue_is_bounded(settings: Settings) -> None:
    """Past BATCH_MAX_QUEUE rows waiting for one version, a row is refused at once (V2 and the queue path too)."""
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
        assert loaded.describe()["shed"] == len(refused)


async def test_a_standing_event_loop_lag_sheds_until_it_clears() -> None:
    """MAX_LOOP_LAG_MS: while the loop runs every timer late (a standing queue), refuse; a lone burst does not."""
    admission = Admission(limit=0, timeout_s=1.0, max_lag_s=0.005)
    watch = asyncio.create_task(admission.watch())
    try:
        await asyncio.sleep(0.05)
        assert not admission.congested and not admission.refuses()
        blocked_until = time.monotonic() + 0.15
        while time.monotonic() < blocked_until:  # NOTE: the loop busy 20 ms at a time, as under overload
            time.sleep(0.02)
            await asyncio.sleep(0)
        assert admission.congested and admission.refuses() and admission.lag_s > 0.005
        assert not admission.refuses(lag=False), "a batch (slots only) is still admitted: it is the cheapest work"
        admission.enter()
        admission.leave()
        deadline = time.monotonic() + 2
        while admission.congested:
            assert time.monotonic() < deadline, "the shedding never stopped once the loop was idle"
            await asyncio.sleep(0.01)
        admission.enter()
    finally:
        watch.cancel()


async def test_the_queue_path_waits_out_a_full_model_queue_instead_of_failing_the_batch(settings: Settings) -> None:
    """A message refused by a full model queue would fail its batch, be redelivered at once and, after
    maxDeliveryCount tries, dead-letter a valid payment: the queue path backs off and scores it."""
    from shared.queue.handler import PaymentBatch
    from shared.queue.idempotency import MemoryResultStore
    from shared.queue.messages import Incoming
    from shared.queue.publisher import MemoryPublisher

    tight = dataclasses.replace(settings, batch=dataclasses.replace(settings.batch, max_queue=8), max_batch_items=8)
    async for _, core in _app(dataclasses.replace(tight, cache=dataclasses.replace(settings.cache, l1_size=0))):

        async def service(core: ScoringService = core) -> ScoringService:
            return core

        publisher = MemoryPublisher()
        handler = PaymentBatch(service, MemoryResultStore(3600), publisher, max_message_bytes=65536)
        messages = [Incoming(f"m{i}", orjson_event(event_id=f"q{i}", amount=float(i) + 0.5)) for i in range(64)]
        verdicts = await handler.handle(messages)
        assert [v.outcome for v in verdicts] == ["completed"] * 64
        assert core.active().describe()["shed"] > 0, "the model queue did refuse rows: the path waited them out"


def orjson_event(**overrides: object) -> bytes:
    import orjson

    return orjson.dumps(event(**overrides))
