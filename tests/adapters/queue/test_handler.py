"""The batch handler over the real core, with the result store and the publisher as fakes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest

from shared.adapters.queue.budget import BatchBudget
from shared.adapters.queue.handler import COMPLETED_QUEUE, QueueHandler
from shared.adapters.queue.idempotency import MemoryResultStore
from shared.adapters.queue.messages import REJECTED_QUEUE, Incoming, Outbound, rejection_id
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.service import ScoringService
from shared.errors import PublishFailed, ResultStoreDown, ScoringError
from shared.settings import Settings
from tests.conftest import event

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def message(event_id: str = "evt-1", *, message_id: str | None = None, delivery: int = 1, **fields: object) -> Incoming:
    return Incoming(
        message_id=message_id or event_id,
        body=json.dumps(event(event_id=event_id, **fields)).encode(),
        delivery_count=delivery,
        enqueued_time=datetime(2026, 11, 29, 3, 12, tzinfo=UTC),
        correlation_id=f"corr-{event_id}",
        properties=TRACE,
    )


SHORT = BatchBudget(1.0, 0.3)  # an outage outlasts it at once: the tests of what follows a hold


def batch_over(
    service: ScoringService,
    store: MemoryResultStore | None = None,
    publisher: MemoryPublisher | None = None,
    budget: BatchBudget | None = None,
) -> QueueHandler:
    async def get() -> ScoringService:
        return service

    return QueueHandler(
        get, store or MemoryResultStore(), publisher or MemoryPublisher(), max_message_bytes=256 * 1024, budget=budget
    )


def sent(batch: QueueHandler) -> list[Outbound]:
    assert isinstance(batch.publisher, MemoryPublisher)
    return batch.publisher.sent


async def test_a_batch_is_scored_in_model_batches_and_each_result_published_once(service: ScoringService) -> None:
    batch = batch_over(service)
    before = service.active().batcher.batches
    msgs = [message(f"e-{i}", amount=10.0 + i) for i in range(32)]
    handled = await batch.handle(msgs)
    assert [h.outcome for h in handled] == ["completed"] * 32
    assert service.active().batcher.batches - before <= 32 // 2, "the messages did not share model batches"
    out = sent(batch)
    assert [m.message_id for m in out] == [f"e-{i}" for i in range(32)]
    assert {m.queue for m in out} == {COMPLETED_QUEUE}
    first = out[0]
    assert first.correlation_id == "corr-e-0"
    assert first.properties["traceparent"].split("-")[1] == TRACE["traceparent"].split("-")[1]  # the same trace


async def test_the_result_is_the_http_result_plus_queue_facts(service: ScoringService) -> None:
    batch = batch_over(service)
    [handled] = await batch.handle([message("q-1", delivery=3)])
    body = orjson.loads(handled.body or b"")
    assert body["event_id"] == "q-1" and body["decision"] in ("approve", "review", "decline")
    assert {"risk_score", "model", "model_version", "timings_ms", "reason"} <= set(body)
    assert body["enqueued_time"] == "2026-11-29T03:12:00Z" and body["delivery_count"] == 3
    assert body["processing_ms"] > 0


async def test_the_same_message_twice_keeps_one_result_and_publishes_it_identically(service: ScoringService) -> None:
    store, publisher = MemoryResultStore(), MemoryPublisher()
    batch = batch_over(service, store, publisher)
    [first] = await batch.handle([message("dup-1")])
    [again] = await batch.handle([message("dup-1", delivery=2)])  # a redelivery
    assert (first.outcome, again.outcome) == ("completed", "duplicate")
    assert [m.body for m in publisher.sent] == [first.body, first.body]  # byte for byte
    assert [m.message_id for m in publisher.sent] == ["dup-1", "dup-1"]
    assert len(publisher.delivered(COMPLETED_QUEUE)) == 1  # what duplicate detection lets through
    [kept] = await store.find(["dup-1"])
    assert kept is not None and kept.body == first.body


async def test_a_reused_event_id_with_other_content_is_a_conflict_never_the_first_result(
    service: ScoringService,
) -> None:
    store, publisher = MemoryResultStore(), MemoryPublisher()
    batch = batch_over(service, store, publisher)
    [first] = await batch.handle([message("dup-2", amount=12.0)])
    [again] = await batch.handle([message("dup-2", message_id="m-2", amount=999.0)])
    assert (first.outcome, again.outcome) == ("completed", "rejected")
    assert again.error is not None and again.error.code == "event_id_conflict"
    assert [m.queue for m in publisher.sent] == [COMPLETED_QUEUE, REJECTED_QUEUE]
    assert again.body is not None and first.body is not None and first.body not in again.body


async def test_a_payment_twice_in_one_batch_yields_one_result(service: ScoringService) -> None:
    batch = batch_over(service)
    handled = await batch.handle([message("p-1", message_id="m-a"), message("p-1", message_id="m-b")])
    assert [h.outcome for h in handled] == ["completed", "duplicate"]
    assert handled[0].body == handled[1].body
    assert {m.message_id for m in sent(batch)} == {"p-1"}


async def test_one_id_with_two_payments_in_one_batch_scores_the_first_and_refuses_the_second(
    service: ScoringService,
) -> None:
    batch = batch_over(service)
    handled = await batch.handle([message("p-2", message_id="m-a"), message("p-2", message_id="m-b", amount=5.0)])
    assert [h.outcome for h in handled] == ["completed", "rejected"]
    assert handled[1].error is not None and handled[1].error.code == "event_id_conflict"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{broken", "malformed_json"),
        (json.dumps(event(amount=-1)).encode(), "invalid_event"),
        (b"\xff\xfe binary", "malformed_json"),
        (json.dumps(event(note="x" * 300_000)).encode(), "payload_too_large"),
    ],
)
async def test_a_poison_message_is_rejected_while_its_batch_completes(
    service: ScoringService, body: bytes, code: str
) -> None:
    batch = batch_over(service)
    poison = Incoming(message_id="m-bad", body=body)
    handled = await batch.handle([message("ok-1"), poison, message("ok-2")])
    assert [h.outcome for h in handled] == ["completed", "rejected", "completed"]
    assert handled[1].error is not None and handled[1].error.code == code
    rejected = [m for m in sent(batch) if m.queue == REJECTED_QUEUE]
    assert [m.message_id for m in rejected] == [rejection_id(poison)]
    record = orjson.loads(rejected[0].body)
    assert record["error"] == code and record["body_bytes"] == len(body)
    assert len(rejected[0].body) < 4096 or code != "payload_too_large"


async def test_store_down_fails_those_messages_and_publishes_nothing_for_them(service: ScoringService) -> None:
    store = MemoryResultStore()
    store.down = True
    batch = batch_over(service, store, budget=SHORT)
    handled = await batch.handle([message("s-1"), Incoming(message_id="m-bad", body=b"{")])
    assert [h.outcome for h in handled] == ["failed", "rejected"]
    assert isinstance(handled[0].error, ResultStoreDown)
    assert [m.queue for m in sent(batch)] == [REJECTED_QUEUE]  # the poison one still leaves at once


@pytest.mark.parametrize("down", ["store", "publisher"])
async def test_a_short_outage_is_waited_out_inside_the_batch_and_spends_no_delivery(
    service: ScoringService, down: str
) -> None:
    store, publisher = MemoryResultStore(), MemoryPublisher()
    batch = batch_over(service, store, publisher, budget=BatchBudget(6.0, 1.0))
    target = store if down == "store" else publisher
    target.down = True

    async def back() -> None:
        await asyncio.sleep(0.8)
        target.down = False

    restore = asyncio.get_running_loop().create_task(back())
    started = time.perf_counter()
    handled = await batch.handle([message(f"o-{i}", amount=10.0 + i) for i in range(8)])
    await restore
    assert [h.outcome for h in handled] == ["completed"] * 8  # held, then done: nothing to redeliver
    assert 0.8 <= time.perf_counter() - started < 5.0
    assert [m.message_id for m in publisher.delivered(COMPLETED_QUEUE)] == [f"o-{i}" for i in range(8)]


class Poisoned:
    """The core, but one event meets a fault of ours (an exception no adapter translates)."""

    def __init__(self, service: ScoringService, poisoned: str) -> None:
        self._service, self._poisoned = service, poisoned

    def __getattr__(self, name: str) -> object:
        return getattr(self._service, name)

    async def score(self, event: object, **kwargs: object) -> object:
        if getattr(event, "event_id", None) == self._poisoned:
            raise KeyError("a bug met by this message alone")
        return await self._service.score(event, **kwargs)  # type: ignore[arg-type]


async def test_a_poisoned_message_among_63_good_ones_fails_only_itself(service: ScoringService) -> None:
    async def get() -> ScoringService:
        return Poisoned(service, "g-17")  # type: ignore[return-value]

    publisher = MemoryPublisher()
    batch = QueueHandler(get, MemoryResultStore(), publisher, max_message_bytes=1 << 18)
    handled = await batch.handle([message(f"g-{i}", amount=10.0 + i) for i in range(64)])
    outcomes = [h.outcome for h in handled]
    assert outcomes.count("completed") == 63 and outcomes[17] == "rejected"
    assert handled[17].error is not None and handled[17].error.code == "unexpected"
    assert "KeyError" in handled[17].error.detail and "a bug" not in handled[17].error.detail
    [rejected] = publisher.delivered(REJECTED_QUEUE)
    record = orjson.loads(rejected.body)
    assert record["message_id"] == "g-17" and record["error"] == "unexpected"


async def test_no_model_ready_fails_the_valid_messages_only() -> None:
    from shared.errors import NotReady

    async def not_ready() -> ScoringService:
        raise NotReady("models are still loading")

    batch = QueueHandler(not_ready, MemoryResultStore(), MemoryPublisher(), max_message_bytes=1 << 18, budget=SHORT)
    handled = await batch.handle([message("n-1"), Incoming(message_id="m-bad", body=b"[")])
    assert [h.outcome for h in handled] == ["failed", "rejected"]
    assert handled[0].reason == "not_ready: models are still loading"


async def test_publishing_failed_fails_what_it_carried_and_the_redelivery_sends_the_kept_result(
    service: ScoringService,
) -> None:
    store, publisher = MemoryResultStore(), MemoryPublisher()
    batch = batch_over(service, store, publisher, budget=SHORT)
    publisher.down = True
    [failed] = await batch.handle([message("pf-1")])
    assert failed.outcome == "failed" and isinstance(failed.error, PublishFailed)
    kept = await store.find(["pf-1"])
    publisher.down = False
    [redelivered] = await batch.handle([message("pf-1", delivery=2)])
    assert redelivered.outcome == "duplicate" and [m.body for m in publisher.sent] == [k.body for k in kept if k]


class Crash(BaseException):
    """The process dies here (not an error the handler may catch)."""


class CrashingStore(MemoryResultStore):
    def __init__(self, at: str) -> None:
        super().__init__()
        self.at = at

    async def keep(self, items: list[tuple[str, bytes]]) -> list[bytes]:  # type: ignore[override]
        if self.at == "before-store":
            raise Crash
        kept = await super().keep(items)
        if self.at == "after-store":
            raise Crash
        return kept


class CrashingPublisher(MemoryPublisher):
    def __init__(self, crash_after_send: bool) -> None:
        super().__init__()
        self.crash_after_send = crash_after_send

    async def publish(self, messages: list[Outbound]) -> None:  # type: ignore[override]
        await super().publish(messages)
        if self.crash_after_send and messages:
            self.crash_after_send = False
            raise Crash


@pytest.mark.parametrize("point", ["after-scoring", "after-storing", "after-sending", "before-completing"])
async def test_a_crash_at_each_point_ends_in_exactly_one_published_result(service: ScoringService, point: str) -> None:
    """The first delivery dies at `point`; Service Bus redelivers (lock expiry); one result comes out."""
    publisher = CrashingPublisher(crash_after_send=point == "after-sending")
    store: MemoryResultStore = {
        "after-scoring": CrashingStore("before-store"),
        "after-storing": CrashingStore("after-store"),
    }.get(point, MemoryResultStore())
    first = batch_over(service, store, publisher)
    msgs = [message("c-1"), message("c-2", amount=7.0)]
    if point == "before-completing":
        await first.handle(msgs)  # everything done; the host dies before completing the messages
    else:
        with pytest.raises(Crash):
            await first.handle(msgs)
    if isinstance(store, CrashingStore):
        store.at = ""  # the next process does not crash
    redelivery = batch_over(service, store, publisher)  # a fresh replica, the same Redis and queue
    handled = await redelivery.handle([replace(m, delivery_count=2) for m in msgs])
    assert all(h.outcome in ("completed", "duplicate") for h in handled)
    delivered = publisher.delivered(COMPLETED_QUEUE)
    assert sorted(m.message_id for m in delivered) == ["c-1", "c-2"]
    for m in delivered:  # every publish of a payment carried the same bytes
        assert {o.body for o in publisher.sent if o.message_id == m.message_id} == {m.body}
    assert [[k.body for k in await store.find([m.message_id]) if k] for m in delivered] == [[m.body] for m in delivered]


async def test_two_replicas_scoring_the_same_payment_publish_the_first_kept_result(service: ScoringService) -> None:
    """Both miss the store, both score: SET NX lets one result win, and the other publishes it."""
    import asyncio

    store, publisher = MemoryResultStore(), MemoryPublisher()
    a, b = batch_over(service, store, publisher), batch_over(service, store, publisher)
    results = await asyncio.gather(a.handle([message("r-1")]), b.handle([message("r-1", delivery=2)]))
    outcomes = sorted(h.outcome for [h] in results)
    assert outcomes in (["completed", "duplicate"], ["completed", "completed"])
    assert len({m.body for m in publisher.sent}) == 1


async def test_every_error_of_the_core_keeps_its_verdict(
    services: Callable[[Settings], Awaitable[ScoringService]], settings: Settings
) -> None:
    """A retryable error from scoring fails the message; nothing is kept, nothing published."""
    service = await services(replace(settings, default_model="nope"))
    batch = batch_over(service)
    [handled] = await batch.handle([message("x-1")])
    assert handled.outcome == "failed" and isinstance(handled.error, ScoringError) and handled.error.retryable
    assert sent(batch) == []
