"""An event id binds its content, across replicas sharing a real Redis: the same payment is a
duplicate with the first result; the same id with another payment is a conflict, and a replay
older than the idempotency window is refused rather than scored a second time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from shared.adapters.queue.handler import COMPLETED_QUEUE, QueueHandler
from shared.adapters.queue.idempotency import RedisResultStore
from shared.adapters.queue.messages import REJECTED_QUEUE, Incoming
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.service import ScoringService
from tests.conftest import event

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def message(event_id: str, *, message_id: str | None = None, at: datetime = NOW, **fields: object) -> Incoming:
    body = event(event_id=event_id, timestamp=at.isoformat().replace("+00:00", "Z"), **fields)
    return Incoming(message_id=message_id or event_id, body=json.dumps(body).encode())


@pytest.fixture
async def replicas(
    service: ScoringService, redis_url: str, redis_prefix: str
) -> AsyncIterator[Callable[..., QueueHandler]]:
    """`replica(max_age_s=...)`: a handler over the core and its own client of the shared Redis."""
    made: list[QueueHandler] = []

    async def get() -> ScoringService:
        return service

    def replica(max_age_s: float = 3300.0, now: datetime = NOW) -> QueueHandler:
        store = RedisResultStore.from_url(redis_url, ttl_s=3600, prefix=redis_prefix)
        handler = QueueHandler(
            get, store, MemoryPublisher(), max_message_bytes=65536, max_age_s=max_age_s, clock=now.timestamp
        )
        made.append(handler)
        return handler

    yield replica
    for handler in made:
        await handler.aclose()


def published(handler: QueueHandler, queue: str) -> list[dict[str, Any]]:
    assert isinstance(handler.publisher, MemoryPublisher)
    return [orjson.loads(m.body) for m in handler.publisher.sent if m.queue == queue]


async def test_the_same_payment_on_another_replica_is_a_duplicate_with_the_first_result(
    replicas: Callable[..., QueueHandler],
) -> None:
    a, b = replicas(), replicas()
    [first] = await a.handle([message("bind-1", amount=12.0)])
    [again] = await b.handle([message("bind-1", message_id="redelivered", amount=12.0)])
    assert (first.outcome, again.outcome) == ("completed", "duplicate") and again.body == first.body


async def test_the_same_id_with_a_changed_amount_is_a_conflict_and_publishes_no_result(
    replicas: Callable[..., QueueHandler],
) -> None:
    a, b = replicas(), replicas()
    [first] = await a.handle([message("bind-2", amount=12.0)])
    [forged] = await b.handle([message("bind-2", message_id="forged", amount=9_000.0, merchant_id="m-else")])
    assert first.outcome == "completed" and forged.outcome == "rejected"
    assert forged.error is not None and forged.error.code == "event_id_conflict"
    assert published(b, COMPLETED_QUEUE) == []  # nothing published as a result
    [record] = published(b, REJECTED_QUEUE)
    assert record["error"] == "event_id_conflict" and "risk_score" not in json.dumps(record)


async def test_two_replicas_racing_with_two_payments_under_one_id_answer_one_and_refuse_the_other(
    replicas: Callable[..., QueueHandler],
) -> None:
    import asyncio

    a, b = replicas(), replicas()
    [x], [y] = await asyncio.gather(
        a.handle([message("bind-3", amount=12.0)]), b.handle([message("bind-3", amount=13.0)])
    )
    assert sorted((x.outcome, y.outcome)) == ["completed", "rejected"]
    refused = x if x.outcome == "rejected" else y
    assert refused.error is not None and refused.error.code == "event_id_conflict"


async def test_a_replay_older_than_the_idempotency_window_is_refused_not_scored_again(
    replicas: Callable[..., QueueHandler], redis_client: Any, redis_prefix: str
) -> None:
    """A dead-lettered message replayed after its result expired: the result is gone, so the event
    would be scored afresh; its timestamp says it is past the window, and it is refused instead."""
    written = NOW - timedelta(hours=2)
    later = replicas(max_age_s=3300.0)  # the replay, two hours after the payment
    [replayed] = await later.handle([message("bind-4", at=written)])
    assert replayed.outcome == "rejected" and replayed.error is not None and replayed.error.code == "event_expired"
    assert published(later, COMPLETED_QUEUE) == []
    inside = replicas(max_age_s=3300.0)
    [fresh] = await inside.handle([message("bind-5", at=NOW - timedelta(minutes=50))])
    assert fresh.outcome == "completed"


async def test_an_event_stamped_in_the_future_cannot_stretch_its_window(replicas: Callable[..., QueueHandler]) -> None:
    handler = replicas()
    [ahead] = await handler.handle([message("bind-6", at=NOW + timedelta(hours=3))])
    assert ahead.outcome == "rejected" and ahead.error is not None and ahead.error.code == "invalid_event"
    [skewed] = await handler.handle([message("bind-7", at=NOW + timedelta(minutes=2))])
    assert skewed.outcome == "completed"  # within the clock skew allowed


def test_the_window_must_end_before_the_result_expires() -> None:
    from shared.errors import SettingsError
    from shared.settings import Settings

    with pytest.raises(SettingsError, match="EVENT_MAX_AGE_S"):
        Settings.from_env({"RESULT_TTL_S": "3600", "EVENT_MAX_AGE_S": "3500"})
    assert Settings.from_env({"RESULT_TTL_S": "3600"}).event_max_age_s <= 3600 - 300


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(event(user_id="u-payer-7", note="my card, my boss's gift")).encode(),
        b'{"event_id": "e-9", "user_id": "u-payer-7", "note": "my card, my boss\'s gift", "amount": ',  # cut short
    ],
)
def test_a_rejection_record_names_the_payment_never_its_payer_or_note(body: bytes) -> None:
    from shared.adapters.queue.messages import rejection_record
    from shared.domain.records import hashed_id
    from shared.errors import InvalidEvent

    record = rejection_record(Incoming(message_id="m-1", body=body), InvalidEvent("x"), b"k" * 32)
    assert b"u-payer-7" not in record and b"gift" not in record
    assert hashed_id("u-payer-7", b"k" * 32) in orjson.loads(record)["body"]


async def test_a_refused_event_reaches_risk_rejected_redacted(replicas: Callable[..., QueueHandler]) -> None:
    handler = replicas()
    [refused] = await handler.handle([message("bind-8", at=NOW - timedelta(hours=5), user_id="u-payer-8")])
    [record] = published(handler, REJECTED_QUEUE)
    assert refused.outcome == "rejected" and record["error"] == "event_expired"
    assert "u-payer-8" not in record["body"] and "gift card" not in record["body"]
