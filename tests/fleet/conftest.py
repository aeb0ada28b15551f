from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from shared.fleet.traffic import Traffic
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.settings import BatchPolicy, OrtOptions, RolloutPolicy
from shared.stores.control import ControlStore, RedisControlStore
from shared.telemetry import metrics
from tests.fleet.replicas import POLICY, WATCH_S, Replica, Replicas


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[str]:
    """A model name of this test's own: the drift gauges are process-wide."""
    name = f"drift-{request.node.name}"
    yield name
    for gauge in (metrics.DRIFT_PSI, metrics.DRIFT_DEFAULTED):
        for key in [k for k in gauge.values if k[0] == name]:
            del gauge.values[key]


@pytest.fixture
async def replicas(
    models_dir: Path, redis_url: str, redis_prefix: str, redis_client: object
) -> AsyncIterator[Replicas]:
    """`await replicas()` starts a replica over the one model source and Redis prefix (closed after the test)."""
    from redis.asyncio import Redis

    started: list[Replica] = []

    async def start(*, keep: int = 2, control: ControlStore | None = None, policy: RolloutPolicy = POLICY) -> Replica:
        registry = ModelRegistry(
            DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8), keep
        )
        store = control or RedisControlStore(Redis.from_url(redis_url), prefix=redis_prefix)
        rollout = Rollout(registry, registry.repository, store, poll_s=0, watch_s=WATCH_S)
        traffic = Traffic(registry, rollout, store, policy, watch_s=WATCH_S)
        await rollout.restore_pins()
        await registry.load_all()
        await traffic.restore()
        replica = Replica(registry, rollout, traffic, store, [])
        replica.jobs = [asyncio.create_task(rollout.run()), asyncio.create_task(traffic.run())]
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.aclose()
