"""Control writes report the truth: a pin or release that Redis did not keep is a 503 naming Redis.

Two replicas over one redis-server of the test's own (stopped, slowed through a proxy, or
flushed) and one model directory holding versions 1 and 2: version 2 serves until a pin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
from redis.asyncio import Redis

from shared.fleet.keys import pin_key
from shared.settings import Settings
from tests.faults.conftest import over_redis, seeded
from tests.faults.proxy import Proxy
from tests.faults.rig import Replica, eventually
from tests.faults.servers import RedisServer
from tests.onnx_models import make_model

Replicas = Callable[[Settings], Replica]
OwnRedis = Callable[..., RedisServer]


def two_versions(models_dir: Path) -> None:
    (models_dir / "fraud" / "2").mkdir(parents=True)
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(make_model(bias=-21.0))


async def fleet(settings: Settings, url: str, replicas: Replicas, models_dir: Path) -> tuple[Replica, Replica]:
    two_versions(models_dir)
    shared = over_redis(settings, await seeded(url))
    a, b = replicas(shared), replicas(shared)
    await a.start()
    await b.start()
    return a, b


async def pinned(replica: Replica) -> object:
    [model] = (await replica.client.get("/api/models")).json()["models"]
    return model["pinned"], model["active_version"]


async def activate(replica: Replica, version: str) -> httpx.Response:
    return await replica.client.post("/api/models/fraud/activate", json={"version": version})


async def test_a_pin_with_redis_down_is_a_503_naming_redis_and_changes_nothing(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, models_dir: Path
) -> None:
    redis = own_redis()
    a, b = await fleet(settings, redis.url, replicas, models_dir)
    assert await pinned(a) == (None, "2")
    await asyncio.to_thread(redis.kill)

    refused = await activate(a, "1")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "control_store_down" and "redis" in refused.json()["detail"]
    assert await pinned(a) == (None, "2"), "nothing changed here that the fleet was not told"
    assert any(d.startswith("control: redis") for d in await a.degraded())
    release = await a.client.delete("/api/models/fraud/activate")
    assert release.status_code == 503 and release.json()["error"] == "control_store_down"

    await asyncio.to_thread(redis.start)
    kept = await activate(a, "1")
    assert kept.status_code == 200 and kept.json()["pinned"] == "1"
    record = await Redis.from_url(redis.url).get(pin_key("fraud"))
    assert record is not None and orjson.loads(record)["version"] == "1"

    async def b_follows() -> bool:
        return await pinned(b) == ("1", "1")

    await eventually(b_follows, 15.0, "the other replica following the pin")


async def test_a_pin_with_redis_slow_is_a_503_and_the_fleet_follows_whatever_redis_kept(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, models_dir: Path
) -> None:
    """Past the store's deadline the write may have landed (the proxy delays answers, not commands):
    the answer says the outcome is unknown, and every replica then follows the record Redis holds."""
    redis = own_redis()
    with Proxy(("127.0.0.1", redis.port)) as proxy:
        a, b = await fleet(settings, f"redis://127.0.0.1:{proxy.port}/0", replicas, models_dir)
        proxy.mode("delay", delay_s=3.0)
        refused = await activate(a, "1")
        assert refused.status_code == 503 and refused.json()["error"] == "control_store_down"
        assert "may or may not" in refused.json()["detail"]
        proxy.mode("pass")
        direct = Redis.from_url(redis.url)
        record = await direct.get(pin_key("fraud"))
        await direct.aclose()
        expected = ("1", "1") if record is not None and orjson.loads(record)["version"] == "1" else (None, "2")

        async def both_follow() -> bool:
            return await pinned(a) == expected and await pinned(b) == expected

        await eventually(both_follow, 15.0, "both replicas on the record Redis kept")


async def test_a_version_outside_the_kept_ones_can_be_pinned_on_every_replica(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, models_dir: Path
) -> None:
    """Versions 1, 2 and 3 with MODELS_KEEP_VERSIONS=2: version 1 is not loaded; a pin loads and keeps it."""
    redis = own_redis()
    (models_dir / "fraud" / "3").mkdir(parents=True)
    (models_dir / "fraud" / "3" / "model.onnx").write_bytes(make_model(bias=-20.0))
    a, b = await fleet(settings, redis.url, replicas, models_dir)
    assert await pinned(a) == (None, "3")
    kept = await activate(a, "1")
    assert kept.status_code == 200 and kept.json()["pinned"] == "1", kept.text

    async def b_follows() -> bool:
        return await pinned(b) == ("1", "1")

    await eventually(b_follows, 15.0, "the other replica loading and pinning version 1")
    missing = await activate(a, "9")
    assert missing.status_code == 404
    assert await pinned(a) == ("1", "1"), "a refused pin leaves the one in force"


async def test_a_pin_lost_to_a_flush_is_written_back_and_a_release_still_reaches_everyone(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, models_dir: Path
) -> None:
    redis = own_redis()
    a, b = await fleet(settings, redis.url, replicas, models_dir)
    assert (await activate(a, "1")).status_code == 200

    async def both(state: tuple[object, str]) -> bool:
        return await pinned(a) == state and await pinned(b) == state

    await eventually(lambda: both(("1", "1")), 15.0, "the pin on both replicas")
    client = Redis.from_url(redis.url)
    await client.flushdb()  # NOTE: every record gone: a missing pin means "lost", never "released"

    async def written_back() -> bool:
        record = await client.get(pin_key("fraud"))
        return record is not None and orjson.loads(record)["version"] == "1"

    await eventually(written_back, 15.0, "the pin written back")
    assert await both(("1", "1")), "the rollback held through the flush"
    assert any("written back" in d for d in await a.degraded() + await b.degraded())

    released = await a.client.delete("/api/models/fraud/activate")
    assert released.status_code == 200 and released.json()["pinned"] is None
    await eventually(lambda: both((None, "2")), 15.0, "the release on both replicas")
    assert orjson.loads(await client.get(pin_key("fraud")) or b"{}")["version"] is None
    await client.aclose()
