"""The cache can no longer evict the feature store: proved on a real Redis under a small maxmemory.

A dedicated redis-server (2 MB, the policy under test) holds 2,000 users' features, then the
service's own traffic writes predictions (PREDICTION_L2=always, every row new) until Redis is
full. Under volatile-lru (what infra/ sets) every user survives and no event scores on
defaults; under allkeys-lru (the first wave's policy) users are evicted and events silently
default, which is what this test exists to catch.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from redis.asyncio import Redis

from shared.core.wiring import build_service
from shared.domain.events import decode_event
from shared.features.store import seed_redis, user_key
from shared.settings import CachePolicy, Settings
from tests.conftest import _unavailable, closed_port, event

USERS = {f"u{i:05d}": {"user_avg_amount_30d": 40.0 + i % 97, "user_txn_count_24h": float(i % 13)} for i in range(2000)}


@pytest.fixture
def small_redis(request: pytest.FixtureRequest) -> Iterator[str]:
    """A redis-server of our own with `maxmemory 2mb` and the policy the test names."""
    if shutil.which("redis-server") is None:
        _unavailable("redis-server")
    policy, port = request.param, closed_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--maxmemory", "2mb", "--maxmemory-policy", policy],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
            assert time.monotonic() < deadline and server.poll() is None, "redis-server did not start"
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(10)


async def defaulted_share_under_prediction_pressure(settings: Settings, url: str) -> tuple[float, int, int]:
    """Seed users, drive the service's own prediction writes until Redis is full, then score every user."""
    assert await seed_redis(url, USERS) == len(USERS)
    # NOTE: a generous round-trip deadline: on a loaded machine a 50 ms one skips writes, and Redis never fills
    cache = CachePolicy(l1_size=0, prediction_l2="always", features_l1_ttl_s=0.001, redis_timeout_ms=1000)
    # NOTE: each wave puts ~2,000 rows before one model at once: past the batcher's `max_queue` they would be shed
    batch = replace(settings.batch, max_queue=1 << 16)
    service = await build_service(replace(settings, redis_url=url, features_file=None, cache=cache, batch=batch))
    client = Redis.from_url(url)
    try:
        users = list(USERS)
        for wave in range(8):  # every row is new: each wave writes ~2,000 predictions
            await asyncio.gather(*(
                service.score(decode_event(json.dumps(event(user_id=u, amount=wave * 10_000 + i + 0.5)).encode()))
                for i, u in enumerate(users)
            ))  # fmt: skip
            await asyncio.sleep(0.01)
        info = await client.info("memory")
        assert int(info["used_memory"]) > 0.9 * int(info["maxmemory"]), "the test never filled Redis"
        present = int(await client.exists(*(user_key(u) for u in users)))
        before = service.stats().events
        for u in users:
            await service.score(decode_event(json.dumps(event(user_id=u, amount=1.5)).encode()))
        after = service.stats().events
        share = (after.defaulted - before.defaulted) / (after.scored - before.scored)
        return share, present, int((await client.info("stats"))["evicted_keys"])
    finally:
        await client.aclose()
        await service.aclose()


@pytest.mark.parametrize("small_redis", ["volatile-lru"], indirect=True)
async def test_a_flood_of_prediction_writes_evicts_no_user_features(settings: Settings, small_redis: str) -> None:
    share, present, evicted = await defaulted_share_under_prediction_pressure(settings, small_redis)
    print(f"volatile-lru: {len(USERS) - present} of {len(USERS)} users evicted, defaulted share {share:.0%}")
    assert present == len(USERS) and share == 0.0
    assert evicted > 0  # predictions were evicted instead


@pytest.mark.parametrize("small_redis", ["allkeys-lru"], indirect=True)
async def test_under_allkeys_lru_the_same_traffic_evicts_users(settings: Settings, small_redis: str) -> None:
    """Mutation: the first wave's policy must fail the test above (users evicted, events defaulted)."""
    share, present, _ = await defaulted_share_under_prediction_pressure(settings, small_redis)
    print(f"allkeys-lru: {len(USERS) - present} of {len(USERS)} users evicted, defaulted share {share:.0%}")
    assert present < len(USERS) and share > 0.0


# -- the Feast layout (shared/features/feast.py): the same flood, Feast's hashes beside the users ------

FEAST_VIEW = "user_stats"


async def feast_keys_left_after_the_flood(settings: Settings, url: str, key_ttl_s: int | None) -> tuple[int, int]:
    """Feast-layout hashes (as `feast materialize` writes them, EXPIRE when `key_ttl_seconds` is set)
    for every user, then the prediction flood of the test above: (hashes written, hashes left)."""
    from shared.domain.feast_spec import FeastEntity, FeastView
    from shared.features.feast import entity_key, seed_feast

    view = FeastView(FEAST_VIEW, (FeastEntity("user_id", "string", "user_id"),))
    client = Redis.from_url(url)
    try:
        rows = {(u,): {"txn_count_24h": int(f["user_txn_count_24h"])} for u, f in USERS.items()}
        await seed_feast(client, "evict", view, rows, event_time_s=time.time(), key_ttl_s=key_ttl_s)
        await defaulted_share_under_prediction_pressure(settings, url)
        keys = [entity_key(view.entities, (u,), "evict") for u in USERS]
        return len(keys), int(await client.exists(*keys))  # type: ignore[arg-type]
    finally:
        await client.aclose()


@pytest.mark.parametrize("small_redis", ["volatile-lru"], indirect=True)
async def test_feast_hashes_without_a_key_ttl_survive_the_flood(settings: Settings, small_redis: str) -> None:
    written, left = await feast_keys_left_after_the_flood(settings, small_redis, key_ttl_s=None)
    assert left == written


@pytest.mark.parametrize("small_redis", ["volatile-lru"], indirect=True)
async def test_feast_hashes_with_key_ttl_seconds_are_evicted_beside_predictions(
    settings: Settings, small_redis: str
) -> None:
    """Why FEAST_REDIS_URL names a Redis of its own when Feast sets `key_ttl_seconds` (docs/capacity.md)."""
    written, left = await feast_keys_left_after_the_flood(settings, small_redis, key_ttl_s=86_400)
    print(f"key_ttl_seconds set: {written - left} of {written} Feast hashes evicted by prediction writes")
    assert left < written
