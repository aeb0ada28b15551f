"""Outcomes kept beside the decisions: real Redis marks, the real directory sink, Azurite's append blobs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from shared.domain.outcomes import Outcome
from shared.domain.records import hashed_id
from shared.errors import SinkError, Unavailable
from shared.stores.outcomes import MemoryMarks, OutcomeStore, RedisMarks
from shared.stores.prediction_log.sinks import BlobSink, DirectorySink, Partition, outcome_name

NOW = datetime(2026, 12, 4, 10, 30, tzinfo=UTC)
KEY = b"the log's key"


def outcome(event_id: str = "evt-1", kind: str = "fraud", **changes: Any) -> Outcome:
    fields: dict[str, Any] = {
        "event_id": event_id, "outcome": kind, "source": "chargeback",
        "learned_at": NOW - timedelta(days=1), "amount_lost": 120.0,
    }  # fmt: skip
    fields.update(changes)
    return Outcome(**fields)


def lines(root: Path) -> list[dict[str, Any]]:
    found = sorted(root.glob("outcomes/date=*/hour=*/*.jsonl"))
    return [msgspec.json.decode(line) for path in found for line in path.read_bytes().splitlines()]


@pytest.fixture
def marks(redis_client: Any, redis_prefix: str) -> RedisMarks:
    return RedisMarks(redis_client, redis_prefix)


async def test_outcomes_land_under_the_outcomes_folder_with_the_event_id_hashed_never_raw(
    tmp_path: Path, marks: RedisMarks
) -> None:
    store = OutcomeStore(DirectorySink(tmp_path, "r1", names=outcome_name), marks, KEY)
    assert await store.take([outcome("evt-secret-42")], NOW) == [True]
    (path,) = tmp_path.glob("**/*.jsonl")
    assert path.relative_to(tmp_path).as_posix() == "outcomes/date=2026-12-04/hour=10/r1.jsonl"
    assert b"evt-secret-42" not in path.read_bytes()
    (line,) = lines(tmp_path)
    assert line["event"] == hashed_id("evt-secret-42", KEY)  # the key the decisions' lines use


async def test_the_same_content_restated_is_a_duplicate_across_stores_sharing_redis(
    tmp_path: Path, marks: RedisMarks
) -> None:
    one = OutcomeStore(DirectorySink(tmp_path, "r1", names=outcome_name), marks, KEY)
    two = OutcomeStore(DirectorySink(tmp_path, "r2", names=outcome_name), marks, KEY)
    assert await one.take([outcome(), outcome()], NOW) == [True, False]  # twice in one batch: once
    # the same instant written another way, on another replica: still the same content
    same = outcome(learned_at=(NOW - timedelta(days=1)).astimezone(timezone_plus_2()))
    assert await two.take([same], NOW + timedelta(seconds=1)) == [False]
    assert len(lines(tmp_path)) == 1


def timezone_plus_2() -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=2))


async def test_a_later_outcome_for_the_same_event_is_written_and_both_are_kept_in_order(
    tmp_path: Path, marks: RedisMarks
) -> None:
    store = OutcomeStore(DirectorySink(tmp_path, "r1", names=outcome_name), marks, KEY)
    reversed_on_appeal = outcome(kind="legit", source="review", learned_at=NOW - timedelta(hours=1), amount_lost=None)
    assert await store.take([outcome(), reversed_on_appeal], NOW) == [True, True]
    first, second = lines(tmp_path)
    assert (first["outcome"], second["outcome"]) == ("fraud", "legit")
    assert first["event"] == second["event"]
    assert first["received_at"] < second["received_at"]  # the order they were sent in


class Refusing:
    """A sink that refuses every write (an outage)."""

    name, write_bytes = "dir", 1 << 20

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        raise SinkError("down")

    async def aclose(self) -> None:
        return None


async def test_a_write_that_fails_marks_nothing_so_the_retry_writes_it(tmp_path: Path, marks: RedisMarks) -> None:
    with pytest.raises(Unavailable):
        await OutcomeStore(Refusing(), marks, KEY).take([outcome()], NOW)
    store = OutcomeStore(DirectorySink(tmp_path, "r1", names=outcome_name), marks, KEY)
    assert await store.take([outcome()], NOW) == [True]  # not "duplicate": it never landed
    assert len(lines(tmp_path)) == 1


async def test_marks_that_cannot_be_read_refuse_the_batch_as_unavailable(tmp_path: Path) -> None:
    from redis.asyncio import Redis

    from tests.conftest import closed_port

    client = Redis.from_url(f"redis://127.0.0.1:{closed_port()}", socket_connect_timeout=0.5)
    store = OutcomeStore(DirectorySink(tmp_path, "r1", names=outcome_name), RedisMarks(client), KEY)
    with pytest.raises(Unavailable):
        await store.take([outcome()], NOW)
    assert lines(tmp_path) == []
    await client.aclose()


async def test_outcomes_append_to_blobs_beside_the_decisions(azurite_connection: str) -> None:
    from azure.storage.blob.aio import ContainerClient

    container = f"outcomes-{uuid.uuid4().hex[:12]}"
    client = ContainerClient.from_connection_string(azurite_connection, container)
    store = OutcomeStore(BlobSink(client, "r1", names=outcome_name), MemoryMarks(), KEY)
    try:
        assert await store.take([outcome("evt-a"), outcome("evt-b")], NOW) == [True, True]
        assert await store.take([outcome("evt-a")], NOW) == [False]
        names = [b.name async for b in client.list_blobs()]
        assert names == ["outcomes/date=2026-12-04/hour=10/r1.jsonl"]
        body = await (await client.download_blob(names[0])).readall()
        assert [msgspec.json.decode(x)["event"] for x in body.splitlines()] == [
            hashed_id("evt-a", KEY), hashed_id("evt-b", KEY),
        ]  # fmt: skip
        assert b"evt-a" not in body
    finally:
        await client.delete_container()
        await client.close()
