"""A version that trips a bound on one replica is quarantined on every replica (real Redis)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

from shared.errors import RunOverBudget
from shared.fleet.keys import QuarantineRecord, quarantine_key
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.vetting import VettingPolicy
from shared.settings import BatchPolicy, OrtOptions
from shared.stores.control import RedisControlStore
from tests.models import hostile

PAST_VETTING = VettingPolicy(
    static_shapes=False, extra_ops=frozenset({"Expand"})
)  # NOTE: to the run, to meet its bounds
ROW = np.array([12.0, 0.0, 60.0, 1.0], dtype=np.float32)
Replica = tuple[ModelRegistry, Rollout]


@pytest.fixture
async def replicas(models_dir: Path, redis_url: str, redis_prefix: str) -> AsyncIterator[list[Replica]]:
    """Three replicas over one model directory and one Redis, each serving fraud/2 (the slow chain) over fraud/1."""
    DirectoryRepository(models_dir).publish(ModelRef("fraud", "2"), hostile.slow_chain())
    built: list[tuple[ModelRegistry, Rollout, RedisControlStore, asyncio.Task[None]]] = []
    for _ in range(3):
        source = DirectoryRepository(models_dir)
        registry = ModelRegistry(
            source,
            OrtOptions(run_deadline_ms=50, use_gpu=False),
            BatchPolicy(max_size=8),
            vetting=PAST_VETTING,
            auto_promote=True,
        )
        control = RedisControlStore.from_url(redis_url, prefix=redis_prefix)
        rollout = Rollout(registry, source, control, poll_s=0, watch_s=0.1)
        await registry.load_all()
        built.append((registry, rollout, control, asyncio.create_task(rollout.run())))
    yield [(registry, rollout) for registry, rollout, _, _ in built]
    for registry, _, control, task in built:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await registry.aclose()
        await control.aclose()


async def test_one_replica_trips_and_every_replica_stops_serving_the_version(
    replicas: list[Replica], redis_url: str, redis_prefix: str
) -> None:
    assert [registry.active("fraud").version for registry, _ in replicas] == ["2", "2", "2"]
    first = replicas[0][0]
    with pytest.raises(RunOverBudget):
        await first.active("fraud").score(ROW)
    started = time.monotonic()
    while any(registry.active("fraud").version != "1" for registry, _ in replicas):
        assert time.monotonic() - started < 5, [registry.active("fraud").version for registry, _ in replicas]
        await asyncio.sleep(0.05)
    assert all("deadline" in registry.quarantined("fraud")["2"] for registry, _ in replicas)
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        kept = msgspec.json.decode(await client.get(redis_prefix + quarantine_key("fraud")), type=QuarantineRecord)
    finally:
        await client.aclose()
    assert set(kept.versions) == {"2"}


async def test_a_quarantine_missing_from_the_store_is_written_back(
    replicas: list[Replica], redis_url: str, redis_prefix: str
) -> None:
    from redis.asyncio import Redis

    first = replicas[0][0]
    with pytest.raises(RunOverBudget):
        await first.active("fraud").score(ROW)
    client = Redis.from_url(redis_url)
    try:
        await asyncio.sleep(0.3)
        await client.delete(redis_prefix + quarantine_key("fraud"))  # a FLUSHDB, a failover
        started = time.monotonic()
        while await client.get(redis_prefix + quarantine_key("fraud")) is None:
            assert time.monotonic() - started < 5
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
