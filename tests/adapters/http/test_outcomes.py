"""`POST /api/outcomes` over the ASGI app, the real directory store and real Redis marks."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.domain.records import hashed_id
from shared.settings import PredictionLogPolicy, Settings

KEY = "outcome-key"
NOW = datetime.now(UTC).replace(microsecond=0)  # one instant: the same outcome twice is the same content


def outcome(event_id: str, kind: str = "fraud", *, days_ago: float = 2.0, **changes: Any) -> dict[str, Any]:
    learned = NOW - timedelta(days=days_ago)
    return {"event_id": event_id, "outcome": kind, "source": "chargeback",
            "learned_at": learned.isoformat(), "amount_lost": 10.0} | changes  # fmt: skip


@pytest.fixture
def logged(settings: Settings, tmp_path: Path, redis_url: str, redis_prefix: str) -> Settings:
    policy = PredictionLogPolicy(sink="dir", directory=str(tmp_path / "log"), hash_key=KEY)
    return dataclasses.replace(settings, prediction_log=policy, redis_url=redis_url, redis_prefix=redis_prefix)


@pytest.fixture
def client(logged: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: logged)), raise_server_exceptions=False) as c:
        yield c


def written(root: Path) -> list[dict[str, Any]]:
    paths = sorted((root / "log").glob("outcomes/date=*/hour=*/*.jsonl"))
    return [msgspec.json.decode(line) for p in paths for line in p.read_bytes().splitlines()]


def test_each_outcome_is_written_a_duplicate_or_refused_with_its_code(client: TestClient, tmp_path: Path) -> None:
    body = {"outcomes": [
        outcome("evt-1"),
        outcome("evt-1"),  # the same content again
        outcome("evt-1", "legit", source="review", days_ago=1),  # a later outcome: written too
        outcome("evt-2", source="bank"),  # not a source
        outcome("evt-3", source="other"),  # `other`, undeclared
        outcome("evt-4", days_ago=-1),  # learned tomorrow
        outcome("evt-5", days_ago=400),  # past the log's retention
        outcome("evt-6", source="other", source_detail="issuer fraud report"),
    ]}  # fmt: skip
    answer = client.post("/api/outcomes", json=body)
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert (receipt["written"], receipt["duplicates"], receipt["refused"]) == (3, 1, 4)
    codes = {e["index"]: e["error"] for e in receipt["errors"]}
    assert codes == {3: "invalid_event", 4: "invalid_event", 5: "invalid_event", 6: "event_expired"}
    lines = written(tmp_path)
    assert len(lines) == 3
    assert lines[0]["event"] == hashed_id("evt-1", KEY.encode())  # the key the decisions' lines use


def test_the_envelope_is_refused_whole_as_a_score_batch_is(client: TestClient, logged: Settings) -> None:
    too_many = {"outcomes": [outcome(f"e{i}") for i in range(logged.max_batch_items + 1)]}
    assert client.post("/api/outcomes", json=too_many).json()["error"] == "too_many_items"
    assert client.post("/api/outcomes", content=b"{", headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/api/outcomes", json={"outcomes": []}).status_code == 422


def test_without_the_prediction_log_outcomes_are_refused_naming_the_setting(settings: Settings) -> None:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as c:
        answer = c.post("/api/outcomes", json={"outcomes": [outcome("evt-1")]})
    assert (answer.status_code, answer.json()["error"]) == (404, "not_found")
    assert "PREDICTION_LOG" in answer.json()["detail"]


def test_ten_thousand_hostile_outcomes_end_written_duplicated_or_refused_and_the_counts_add_up(
    client: TestClient, logged: Settings, tmp_path: Path
) -> None:
    rng = random.Random(57)  # noqa: S311 reproducible test data, not a secret
    items: list[dict[str, Any]] = []
    for i in range(10_000):
        kind = rng.random()
        if kind < 0.2 and items:
            items.append(rng.choice(items))  # a restatement (a duplicate, unless its first was refused)
        elif kind < 0.3:
            items.append(outcome(f"evt-{rng.randrange(500)}", "legit", days_ago=rng.random()))  # a conflict
        elif kind < 0.4:
            items.append(outcome(f"evt-{i}", days_ago=-rng.uniform(0.1, 30)))  # the future
        elif kind < 0.45:
            items.append(outcome(f"evt-{i}", source=rng.choice(["", "bank", "CHARGEBACK", "other"])))
        else:
            items.append(
                outcome(f"unknown-{i}" if kind < 0.6 else f"evt-{rng.randrange(500)}", days_ago=rng.uniform(1, 90))
            )
    size, step = logged.max_batch_items, 0
    totals = {"written": 0, "duplicates": 0, "refused": 0, "batch_refused": 0}
    while step < len(items):
        n = size + 1 if rng.random() < 0.05 else rng.randint(1, size)  # oversized now and then
        batch = items[step : step + n]
        answer = client.post("/api/outcomes", json={"outcomes": batch})
        assert answer.status_code < 500, answer.text
        if len(batch) > size:
            assert answer.json()["error"] == "too_many_items"
            totals["batch_refused"] += len(batch)
        else:
            receipt = answer.json()
            assert receipt["written"] + receipt["duplicates"] + receipt["refused"] == len(batch)
            for k in ("written", "duplicates", "refused"):
                totals[k] += receipt[k]
        step += n
    assert sum(totals.values()) == 10_000
    lines = written(tmp_path)
    assert len(lines) == totals["written"]  # every one answered "written" is in the store, once
    assert len({(x["event"], x["digest"]) for x in lines}) == len(lines)
    assert not any("evt-" in x["event"] or "unknown-" in x["event"] for x in lines)
