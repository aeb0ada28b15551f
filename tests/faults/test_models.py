"""The model store (Blob: an Azurite of the test's own) goes down while a replica reloads a model.

Replica A's Blob trigger installs version 2 (it has the bytes) and tells the fleet through
Redis; replica B must read the file from the store, which is down. B keeps serving version 1
(200s, results on the queue), readiness and `scoring_degraded{scoring_component="models"}` say
the store cannot be read, and once it is back B loads version 2 by itself, without a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from azure.storage.blob import BlobServiceClient

from shared.models.repository import BlobRepository, ModelRef
from shared.settings import Settings
from tests.faults.conftest import over_redis, seeded
from tests.faults.rig import HANG_S, Queue, Replica, eventually, payment
from tests.faults.servers import AzuriteServer, RedisServer
from tests.onnx_models import make_model

Replicas = Callable[[Settings], Replica]


async def versions(replica: Replica, tag: str) -> set[str]:
    """The versions that answered a short load (each answer a 200)."""
    answers = await replica.load(tag, 20)
    assert {r.status_code for r in answers} == {200}
    return {r.json()["model_version"] for r in answers}


async def test_azurite_down_during_a_reload(
    settings: Settings,
    models_dir: Path,
    azurite: AzuriteServer,
    own_redis: Callable[..., RedisServer],
    replicas: Replicas,
    queue: Queue,
) -> None:
    container = BlobServiceClient.from_connection_string(azurite.connection_string).get_container_client("models")
    container.create_container()
    store = BlobRepository(container)
    store.publish(ModelRef("fraud", "1"), (models_dir / "fraud" / "1" / "model.onnx").read_bytes())
    fleet = replace(
        over_redis(settings, await seeded(own_redis().url)),
        model_storage=azurite.connection_string,
        models_container="models",
    )
    a = replicas(fleet)
    await a.start()
    b = replicas(fleet)  # NOTE: built last: the process's /api/metrics reads this one
    service = await b.start()
    assert await versions(b, "before") == {"1"} and await b.degraded() == []
    queue.send([payment(f"q-before-{i}", i) for i in range(16)])
    await queue.drain(b.handlers)

    version2 = make_model(bias=-21.0)
    store.publish(ModelRef("fraud", "2"), version2)  # the upload
    await asyncio.to_thread(azurite.stop)  # the store goes down before B has read it
    await a.service.admin.install_model(ModelRef("fraud", "2"), version2)  # A's Blob trigger, bytes in hand

    async def store_missed() -> bool:
        listed = any(r.startswith("models: ") for r in await b.degraded())
        return listed and await b.metric("scoring_degraded", scoring_component="models") == 1

    await eventually(store_missed, 15.0, "the store's outage in readiness")
    assert await versions(b, "during") == {"1"}  # the loaded version keeps serving
    queue.send([payment(f"q-during-{i}", i) for i in range(16)])
    await queue.drain(b.handlers)

    await asyncio.to_thread(azurite.start)

    async def reloaded() -> bool:
        if await versions(b, "after") != {"2"} or await b.degraded():
            return False
        active = await b.metric("scoring_model_active", scoring_model="fraud", scoring_model_version="2")
        return active == 1 and await b.metric("scoring_degraded", scoring_component="models") == 0

    await eventually(reloaded, 20.0, "the reload of version 2 once the store is back")
    assert len(queue.results()) == 32 and queue.republished_identically()
    assert b.service is service
    assert set(b.statuses) == {200} and b.slowest_s < HANG_S


async def test_the_model_directory_gone(settings: Settings, models_dir: Path, replicas: Replicas) -> None:
    """MODELS_DIR vanishes (an unmounted volume) while the poller reads it, then comes back."""
    replica = replicas(replace(settings, model_poll_s=0.05))
    service = await replica.start()
    away = models_dir.with_name("models-away")
    models_dir.rename(away)

    async def missed() -> bool:
        listed = any(r.startswith("models: MODELS_DIR") for r in await replica.degraded())
        return listed and await replica.metric("scoring_degraded", scoring_component="models") == 1

    await eventually(missed, 10.0, "the missing directory in readiness")
    assert await versions(replica, "during") == {"1"}
    away.rename(models_dir)

    async def back() -> bool:
        return (
            not await replica.degraded() and await replica.metric("scoring_degraded", scoring_component="models") == 0
        )

    await eventually(back, 10.0, "readiness clean again")
    assert replica.service is service
    assert set(replica.statuses) == {200} and replica.slowest_s < HANG_S
