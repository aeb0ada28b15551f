"""The result store: Redis is the subject here, so a real Redis; and the in-process store."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.queue.idempotency import KEY, Kept, MemoryResultStore, RedisResultStore
from shared.errors import ResultStoreDown
from shared.settings import Settings
from shared.stores.cache import codec
from tests.conftest import closed_port

REPO = Path(__file__).resolve().parents[3]
A, B = b"a" * 16, b"b" * 16  # two payments' digests


def duplicate_detection_window_s() -> float:
    """The queues' duplicate-detection window as infra/ declares it (ISO 8601, minutes or hours)."""
    text = (REPO / "infra" / "modules" / "servicebus.bicep").read_text()
    match = re.search(r"param duplicateDetectionWindow string = 'PT(\d+)([MH])'", text)
    assert match, "duplicateDetectionWindow not found in infra/modules/servicebus.bicep"
    return int(match.group(1)) * (60 if match.group(2) == "M" else 3600)


def test_results_outlive_the_duplicate_detection_window() -> None:
    """A redelivery later than the TTL would score anew; one within the window must find the result."""
    assert Settings().result_ttl_s > duplicate_detection_window_s()


async def test_redis_keeps_the_first_result_with_a_ttl_compressed(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    store = RedisResultStore.from_url(redis_url, ttl_s=3600, prefix=redis_prefix)
    try:
        first = Kept(A, b'{"event_id":"e-1","risk_score":0.5}' * 8)
        other = Kept(B, b"other")
        assert await store.find(["e-1", "e-2"]) == [None, None]
        assert await store.keep([("e-1", first)]) == [first]
        assert await store.keep([("e-1", Kept(B, b"a second, different result")), ("e-2", other)]) == [first, other]
        assert await store.find(["e-1", "e-2", "e-3"]) == [first, other, None]
        raw = await redis_client.get(redis_prefix + KEY + "e-1")
        assert raw[:1] == codec.LZ4 and codec.decode(raw) == first.pack()  # compressed like the cache
        [found] = await store.find(["e-1"])
        assert found is not None and found.answers(A) and not found.answers(B)  # the id binds its payment
        ttl = await redis_client.pttl(redis_prefix + KEY + "e-1")
        assert 3_500_000 < ttl <= 3_600_000  # volatile-lru: every key the service writes expires
    finally:
        await store.aclose()


async def test_two_writers_at_once_keep_one_result(redis_url: str, redis_prefix: str, redis_client: Any) -> None:
    stores = [RedisResultStore.from_url(redis_url, ttl_s=60, prefix=redis_prefix) for _ in range(4)]
    try:
        kept = await asyncio.gather(
            *(s.keep([("race", Kept(bytes([i]) * 16, f"result {i}".encode()))]) for i, s in enumerate(stores))
        )
        assert len({k[0] for k in kept}) == 1
    finally:
        for s in stores:
            await s.aclose()


async def test_redis_down_is_an_error_never_a_miss() -> None:
    store = RedisResultStore.from_url(f"redis://127.0.0.1:{closed_port()}/0", ttl_s=60, timeout_s=0.5)
    try:
        with pytest.raises(ResultStoreDown, match="result store: redis"):
            await store.find(["e-1"])
        with pytest.raises(ResultStoreDown):
            await store.keep([("e-1", Kept(A, b"x"))])
    finally:
        await store.aclose()


async def test_a_record_from_before_digests_answers_no_payment(
    redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    """A rolling deploy meets results an older release kept (no digest): their content cannot be vouched
    for, so no payment under that id gets them (a seeded legacy `approve` once answered any payment)."""
    store = RedisResultStore.from_url(redis_url, ttl_s=60, prefix=redis_prefix)
    try:
        await redis_client.set(redis_prefix + KEY + "old", codec.encode(b'{"event_id":"old"}'), px=60_000)
        [found] = await store.find(["old"])
        assert found == Kept(None, b'{"event_id":"old"}')
        assert not found.answers(A) and not found.answers(B)
    finally:
        await store.aclose()


async def test_memory_store_keeps_the_first_and_expires() -> None:
    store = MemoryResultStore(ttl_s=1.0)
    assert await store.keep([("a", Kept(A, b"1"))]) == [Kept(A, b"1")]
    assert await store.keep([("a", Kept(B, b"2"))]) == [Kept(A, b"1")]
    await asyncio.sleep(1.05)
    assert await store.find(["a"]) == [None]
    store.down = True
    with pytest.raises(ResultStoreDown):
        await store.find(["a"])
