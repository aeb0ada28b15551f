"""The `risk-outcomes` function over the binding types the runtime builds, real Redis marks and the
real directory store: per-message isolation, duplicates across deliveries, an outage held then failed."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from azure.functions.servicebus import ServiceBusMessage

from shared.adapters.functions import FunctionHandlers
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.holder import ServiceHolder
from shared.errors import SettingsError, Unavailable
from shared.settings import PredictionLogPolicy, Settings

NOW = datetime.now(UTC).replace(microsecond=0)


def sb(message_id: str, **changes: Any) -> ServiceBusMessage:
    body = {"event_id": "evt-1", "outcome": "fraud", "source": "chargeback",
            "learned_at": (NOW - timedelta(days=1)).isoformat()} | changes  # fmt: skip
    raw = json.dumps(body).encode()
    return ServiceBusMessage(
        body=raw, message_id=message_id, user_properties={}, delivery_count=1, application_properties={}
    )


@pytest.fixture
def logged(settings: Settings, tmp_path: Path, redis_url: str, redis_prefix: str) -> Settings:
    log = PredictionLogPolicy(sink="dir", directory=str(tmp_path / "log"), hash_key="k")
    budget = dataclasses.replace(settings, queue_batch_budget_ms=6_000)
    return dataclasses.replace(budget, prediction_log=log, redis_url=redis_url, redis_prefix=redis_prefix)


def lines(root: Path) -> list[dict[str, Any]]:
    found = sorted((root / "log").glob("outcomes/**/*.jsonl"))
    return [msgspec.json.decode(x) for p in found for x in p.read_bytes().splitlines()]


async def test_a_bad_message_is_rejected_alone_and_kept_on_the_rejected_queue(logged: Settings, tmp_path: Path) -> None:
    publisher = MemoryPublisher()
    handlers = FunctionHandlers(ServiceHolder(lambda: logged), publisher=publisher)
    future = (NOW + timedelta(days=2)).isoformat()
    batch = [
        sb("m-1"),
        sb("m-2", source="bank"),
        sb("m-3", event_id="evt-3", learned_at=future),
        sb("m-4", event_id="evt-4"),
    ]
    await handlers.outcomes(batch)
    assert len(lines(tmp_path)) == 2
    rejected = [json.loads(m.body) for m in publisher.delivered("risk-rejected")]
    assert [(r["message_id"], r["error"]) for r in rejected] == [("m-2", "invalid_event"), ("m-3", "invalid_event")]
    await handlers.outcomes([sb("m-1")])  # delivered again: a duplicate, not written twice
    assert len(lines(tmp_path)) == 2
    await handlers.aclose()


async def test_a_store_that_stays_down_fails_the_batch_for_redelivery_and_writes_nothing(
    logged: Settings, tmp_path: Path
) -> None:
    from tests.conftest import closed_port

    down = dataclasses.replace(logged, redis_url=f"redis://127.0.0.1:{closed_port()}")
    handlers = FunctionHandlers(ServiceHolder(lambda: down), publisher=MemoryPublisher())
    started = time.monotonic()
    with pytest.raises(Unavailable):
        await handlers.outcomes([sb("m-1")])
    assert time.monotonic() - started > 3.0  # waited out inside the budget (6 s, a sixth kept to publish) first
    assert lines(tmp_path) == []
    await handlers.aclose()


async def test_without_the_prediction_log_the_batch_is_held_not_dropped(settings: Settings) -> None:
    handlers = FunctionHandlers(ServiceHolder(lambda: settings), publisher=MemoryPublisher())
    with pytest.raises(SettingsError):
        await handlers.outcomes([sb("m-1")])
    await handlers.aclose()


def envelope(message_id: str, items: list[dict[str, Any]]) -> ServiceBusMessage:
    raw = json.dumps({"outcomes": items}).encode()
    return ServiceBusMessage(
        body=raw, message_id=message_id, user_properties={}, delivery_count=1, application_properties={}
    )


def item(event_id: str, **changes: Any) -> dict[str, Any]:
    return {"event_id": event_id, "outcome": "fraud", "source": "chargeback",
            "learned_at": (NOW - timedelta(days=1)).isoformat()} | changes  # fmt: skip


async def test_an_envelope_of_outcomes_is_judged_outcome_by_outcome(logged: Settings, tmp_path: Path) -> None:
    publisher = MemoryPublisher()
    handlers = FunctionHandlers(ServiceHolder(lambda: logged), publisher=publisher)
    future = (NOW + timedelta(days=2)).isoformat()
    batch = [
        envelope("env-1", [item("evt-1"), item("evt-2", source="bank"), item("evt-3"), item("evt-1")]),
        sb("m-2", event_id="evt-9", learned_at=future),
    ]
    await handlers.outcomes(batch)
    assert len(lines(tmp_path)) == 2  # evt-1 (its restatement a duplicate) and evt-3
    rejected = [json.loads(m.body) for m in publisher.delivered("risk-rejected")]
    assert [(r["message_id"], r["error"]) for r in rejected] == [("env-1#1", "invalid_event"), ("m-2", "invalid_event")]
    assert json.loads(rejected[0]["body"])["source"] == "bank"  # the record holds the outcome refused, not the envelope
    await handlers.aclose()


async def test_an_envelope_past_the_batch_cap_is_rejected_whole_and_nothing_of_it_written(
    logged: Settings, tmp_path: Path
) -> None:
    publisher = MemoryPublisher()
    handlers = FunctionHandlers(ServiceHolder(lambda: logged), publisher=publisher)
    cap = logged.max_batch_items
    await handlers.outcomes([envelope("big", [item(f"evt-{i}") for i in range(cap + 1)]), envelope("ok", [item("a")])])
    assert len(lines(tmp_path)) == 1
    rejected = [json.loads(m.body) for m in publisher.delivered("risk-rejected")]
    assert [(r["message_id"], r["error"]) for r in rejected] == [("big", "too_many_items")]
    await handlers.aclose()
