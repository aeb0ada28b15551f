"""10,000 hostile outcomes (duplicates, conflicts, unknown ids, future dates, undeclared sources,
oversized batches) through both doors: `POST /api/outcomes` and the real `risk-outcomes` handler
(the runtime's ServiceBusMessage, real Redis marks, the real directory store). No 5xx, nothing
lost: every outcome is written, a duplicate, or refused with a code, the counts add up, and the
two doors agree outcome for outcome."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from azure.functions.servicebus import ServiceBusMessage
from starlette.testclient import TestClient

from shared.adapters.functions import incoming
from shared.adapters.http.app import create_app
from shared.adapters.queue.outcomes import OutcomeQueue
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.holder import ServiceHolder
from shared.core.outcomes import build_outcomes
from shared.settings import PredictionLogPolicy, Settings

NOW = datetime.now(UTC).replace(microsecond=0)


def outcome(event_id: str, kind: str = "fraud", *, days_ago: float = 2.0, **changes: Any) -> dict[str, Any]:
    learned = NOW - timedelta(days=days_ago)
    return {"event_id": event_id, "outcome": kind, "source": "chargeback",
            "learned_at": learned.isoformat(), "amount_lost": 10.0} | changes  # fmt: skip


def hostile(n: int, seed: int = 57) -> list[dict[str, Any]]:
    rng = random.Random(seed)  # noqa: S311 reproducible test data, not a secret
    items: list[dict[str, Any]] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.2 and items:
            items.append(rng.choice(items))  # a restatement (a duplicate, unless its first was refused)
        elif kind < 0.3:
            items.append(outcome(f"evt-{rng.randrange(500)}", "legit", days_ago=rng.random()))  # a conflict
        elif kind < 0.38:
            items.append(outcome(f"evt-{i}", days_ago=-rng.uniform(0.1, 30)))  # the future
        elif kind < 0.42:
            items.append(outcome(f"evt-{i}", days_ago=rng.uniform(181, 900)))  # past the log's retention
        elif kind < 0.46:
            items.append(outcome(f"evt-{i}", source=rng.choice(["", "bank", "CHARGEBACK", "other"])))
        else:
            items.append(
                outcome(f"unknown-{i}" if kind < 0.6 else f"evt-{rng.randrange(500)}", days_ago=rng.uniform(1, 90))
            )
    return items


def batches(items: list[dict[str, Any]], cap: int, seed: int = 58) -> list[list[dict[str, Any]]]:
    """Cut `items` into batches of 1..cap, one past the cap now and then (refused whole)."""
    rng = random.Random(seed)  # noqa: S311
    cut, step = [], 0
    while step < len(items):
        n = cap + 1 if rng.random() < 0.05 else rng.randint(1, cap)
        cut.append(items[step : step + n])
        step += n
    return cut


def stored(root: Path) -> list[dict[str, Any]]:
    paths = sorted(root.glob("outcomes/date=*/hour=*/*.jsonl"))
    return [msgspec.json.decode(line) for p in paths for line in p.read_bytes().splitlines()]


@pytest.fixture
def two_logs(settings: Settings, tmp_path: Path, redis_url: str, redis_prefix: str) -> tuple[Settings, Settings]:
    def logged(name: str) -> Settings:
        policy = PredictionLogPolicy(sink="dir", directory=str(tmp_path / name), hash_key="k")
        prefix = f"{redis_prefix}{name}:"  # each door its own marks: both take the same 10,000
        return dataclasses.replace(settings, prediction_log=policy, redis_url=redis_url, redis_prefix=prefix)

    return logged("http"), logged("queue")


async def test_ten_thousand_hostile_outcomes_through_both_doors_end_alike_and_the_counts_add_up(
    two_logs: tuple[Settings, Settings], tmp_path: Path
) -> None:
    http_settings, queue_settings = two_logs
    items = hostile(10_000)
    cut = batches(items, http_settings.max_batch_items)

    by_http: Counter[str] = Counter()
    with TestClient(create_app(ServiceHolder(lambda: http_settings)), raise_server_exceptions=False) as client:
        for batch in cut:
            answer = client.post("/api/outcomes", json={"outcomes": batch})
            assert answer.status_code < 500, answer.text
            body = answer.json()
            if "error" in body:
                by_http[body["error"]] += len(batch)  # the envelope refused whole
                continue
            assert body["written"] + body["duplicates"] + body["refused"] == len(batch)
            by_http.update({"written": body["written"], "duplicate": body["duplicates"]})
            by_http.update(e["error"] for e in body["errors"])

    desk = build_outcomes(queue_settings, "replica-q")
    assert desk is not None
    publisher = MemoryPublisher()
    queue = OutcomeQueue(desk, publisher, max_message_bytes=queue_settings.max_message_bytes)
    by_queue: Counter[str] = Counter()
    sent = records_due = 0
    for n, batch in enumerate(cut):
        # an envelope per batch; a batch of one now and then as a bare outcome (one message, one outcome)
        body = json.dumps(batch[0] if len(batch) == 1 else {"outcomes": batch}).encode()
        msg = ServiceBusMessage(body=body, message_id=f"m-{n}", user_properties={}, delivery_count=1,
                                application_properties={})  # fmt: skip
        for taken in await queue.handle([incoming(msg)]):
            if taken.error is None:
                by_queue[taken.verdict] += 1
            else:
                records_due += 1
                whole = taken.message_id == f"m-{n}" and len(batch) > 1
                by_queue[taken.error.code] += len(batch) if whole else 1
        sent += len(batch)
    await desk.aclose()

    assert sent == sum(by_http.values()) == sum(by_queue.values()) == 10_000  # nothing lost
    assert by_http == by_queue  # the same outcomes, the same verdicts, through either door
    assert {"written", "duplicate", "invalid_event", "event_expired", "too_many_items"} <= set(by_queue)
    for door in ("http", "queue"):
        lines = stored(tmp_path / door)
        assert len(lines) == by_queue["written"]  # every one answered "written" is in the store, once
        assert len({(x["event"], x["digest"]) for x in lines}) == len(lines)
        assert not any("evt-" in x["event"] or "unknown-" in x["event"] for x in lines)  # hashed, never raw
    assert len(publisher.delivered("risk-rejected")) == records_due  # each refusal kept on risk-rejected
