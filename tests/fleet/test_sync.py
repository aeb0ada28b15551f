"""The background sync: the fleet's records applied on every replica, lost ones written back, an automatic abort kept off the request path."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import msgspec
import pytest

from shared.fleet.keys import CanaryRecord, canary_key, shadow_key
from shared.fleet.traffic import Traffic
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.settings import BatchPolicy, OrtOptions
from shared.stores.control import MemoryControlStore, RedisControlStore
from tests.fleet.replicas import POLICY, WATCH_S, Replicas, drive, pinned_pair, publish, until


@pytest.mark.parametrize("stored", [True, False], ids=["store", "no-store"])
async def test_a_canary_tripped_on_the_request_path_is_settled_by_the_background_loop_alone(
    models_dir: Path, stored: bool
) -> None:
    """`observe` counts and trips, and neither writes nor releases: the abort's record and the
    candidate's release wait for the sync's loop, which a trip wakes (no watch tick here)."""
    publish(models_dir, "2")
    store = MemoryControlStore() if stored else None
    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8))
    await registry.load_all()
    rollout = Rollout(registry, registry.repository, store, poll_s=0)
    traffic = Traffic(registry, rollout, store, POLICY, watch_s=3600)
    job: asyncio.Task[None] | None = None
    try:
        await rollout.pin("fraud", "1")
        await traffic.set_canary("fraud", "2", 0.5)
        drive(traffic, "live", 1000, declines_per_100=10)
        drive(traffic, "canary", 200, declines_per_100=40)
        await asyncio.sleep(0.05)  # what the request path set off would run now
        assert not traffic.split("fraud")  # tripped here at once
        assert registry.held("fraud") == {"2"}, "nothing released from the request path"
        if store is not None:
            before = msgspec.json.decode(store.data[canary_key("fraud")], type=CanaryRecord)
            assert before.aborted is None, "nothing written from the request path"
            assert "not kept in Redis yet" in (traffic.problem() or "")
        job = asyncio.create_task(traffic.run())
        await until(lambda: registry.held("fraud") == set(), seconds=2.0)  # woken by the trip, not a tick
        assert traffic.problem() is None
        if store is not None:
            kept = msgspec.json.decode(store.data[canary_key("fraud")], type=CanaryRecord)
            assert kept.aborted is not None and kept.aborted.reason == "decline_share"
        await traffic.set_canary("fraud", "2", 0.5)  # set again; trips again while the loop waits
        drive(traffic, "live", 1000, declines_per_100=10)
        drive(traffic, "canary", 200, declines_per_100=40)
        await until(lambda: registry.held("fraud") == set(), seconds=2.0)
    finally:
        if job is not None:
            job.cancel()
            await asyncio.wait([job], timeout=5)
        await registry.aclose()


async def test_an_abort_the_store_did_not_keep_holds_here_and_is_kept_once_it_can_be(
    replicas: Replicas, models_dir: Path
) -> None:
    publish(models_dir, "2")
    store = MemoryControlStore()
    a = await replicas(control=store)
    await a.traffic.set_canary("fraud", "1", 0.5)
    store.down = True
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 200, declines_per_100=40)
    await asyncio.sleep(5 * WATCH_S)
    assert not a.canary_users() and "not kept in Redis" in (a.traffic.problem() or "")  # routes none, says so
    store.down = False
    await until(lambda: a.traffic.problem() is None)
    stored = msgspec.json.decode(store.data[canary_key("fraud")], type=CanaryRecord)
    assert stored.aborted is not None and stored.aborted.reason == "decline_share" and not a.canary_users()


async def test_a_lost_record_is_written_back(
    replicas: Replicas, models_dir: Path, redis_client: object, redis_prefix: str
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.3)
    await a.traffic.set_shadow("fraud", "2")
    await until(lambda: b.traffic.split("fraud"))
    await redis_client.delete(redis_prefix + canary_key("fraud"), redis_prefix + shadow_key("fraud"))  # type: ignore[attr-defined]
    await until(lambda: "written back" in (a.traffic.problem() or "") + (b.traffic.problem() or ""))
    assert await redis_client.get(redis_prefix + canary_key("fraud")) is not None  # type: ignore[attr-defined]
    assert await redis_client.get(redis_prefix + shadow_key("fraud")) is not None  # type: ignore[attr-defined]
    assert a.traffic.split("fraud") and b.traffic.split("fraud")


@pytest.mark.parametrize("watch", ["traffic", "rollout"])
async def test_the_watch_ends_when_cancelled_even_mid_read(
    models_dir: Path, redis_url: str, redis_prefix: str, redis_client: object, watch: str
) -> None:
    """redis-py's wait_for drops a cancel landing on a read (CPython 3.11, gh-86296): the control
    store raises it again, so neither fleet watch runs on past shutdown."""
    from shared.stores.cache.redis_tier import redis_client as client_for

    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8))
    await registry.load_all()
    store = RedisControlStore(client_for(redis_url, timeout_s=1.0), prefix=redis_prefix)  # as built in production
    rollout = Rollout(registry, registry.repository, store, poll_s=0, watch_s=0)
    traffic = Traffic(registry, rollout, store, POLICY, watch_s=0)
    run = traffic.run if watch == "traffic" else rollout.run
    missed = 0
    try:
        for _ in range(300):
            watch_task = asyncio.create_task(run())
            await asyncio.sleep(random.random() * 0.003)  # noqa: S311 not a secret: a moment
            watch_task.cancel()
            _, running = await asyncio.wait([watch_task], timeout=0.5)
            missed += bool(running)
            while not watch_task.done():
                watch_task.cancel()
                await asyncio.wait([watch_task], timeout=0.1)
    finally:
        await registry.aclose()
        await store.aclose()
    assert missed == 0
