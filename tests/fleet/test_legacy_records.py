"""Fleet records from before digests have an end: rewritten by a replica that serves the version, else not followed."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec
import pytest

from shared.fleet.keys import PinRecord, pin_key
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef, Release, publish_version
from shared.settings import BatchPolicy, OrtOptions
from shared.stores.control import RedisControlStore
from tests.onnx_models import make_model

ORIGINAL, SWAPPED = make_model(bias=1.0), make_model(bias=7.0)
Replica = tuple[ModelRegistry, Rollout]
Start = Callable[[], Awaitable[Replica]]


@pytest.fixture
async def start(models_dir: Path, redis_url: str, redis_prefix: str) -> AsyncIterator[Start]:
    """`await start()`: a replica over the model directory and Redis (watching every 0.1 s)."""
    running: list[tuple[ModelRegistry, RedisControlStore, asyncio.Task[None]]] = []

    async def replica() -> Replica:
        source = DirectoryRepository(models_dir)
        registry = ModelRegistry(source, OrtOptions(), BatchPolicy(max_size=8), auto_promote=False)
        control = RedisControlStore.from_url(redis_url, prefix=redis_prefix)
        rollout = Rollout(registry, source, control, poll_s=0, watch_s=0.1)
        await rollout.restore_pins()
        await registry.load_all()
        running.append((registry, control, asyncio.create_task(rollout.run())))
        return registry, rollout

    yield replica
    for registry, control, task in running:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await registry.aclose()
        await control.aclose()


async def write_legacy_pin(redis_url: str, redis_prefix: str, version: str) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:  # what a release before digests wrote: the version alone
        await client.set(redis_prefix + pin_key("fraud"), msgspec.json.encode({"version": version, "at": 1.0}))
    finally:
        await client.aclose()


async def read_pin(redis_url: str, redis_prefix: str) -> PinRecord:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        return msgspec.json.decode(await client.get(redis_prefix + pin_key("fraud")), type=PinRecord)
    finally:
        await client.aclose()


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 5.0) -> None:
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < seconds, "did not happen in time"
        await asyncio.sleep(0.05)


async def swap(models_dir: Path) -> None:
    """Whoever can write the container replaces version 2's file and its release record together."""
    source = DirectoryRepository(models_dir)
    source.record_release(ModelRef("fraud", "2"), Release(hashlib.sha256(SWAPPED).hexdigest()))
    source.publish(ModelRef("fraud", "2"), SWAPPED)


async def test_a_legacy_pin_is_rewritten_with_the_digest_of_the_file_a_replica_serves(
    start: Start, models_dir: Path, redis_url: str, redis_prefix: str
) -> None:
    publish_version(DirectoryRepository(models_dir), ModelRef("fraud", "2"), ORIGINAL)
    first, _ = await start()
    await first.pin("fraud", "2")  # it serves the original file
    await write_legacy_pin(redis_url, redis_prefix, "2")

    async def rewritten() -> bool:
        return (await read_pin(redis_url, redis_prefix)).sha256 == hashlib.sha256(ORIGINAL).hexdigest()

    await until(rewritten)


async def test_a_new_replica_never_serves_a_file_swapped_under_a_legacy_pin(
    start: Start, models_dir: Path, redis_url: str, redis_prefix: str
) -> None:
    publish_version(DirectoryRepository(models_dir), ModelRef("fraud", "2"), ORIGINAL)
    first, _ = await start()
    await first.pin("fraud", "2")
    await write_legacy_pin(redis_url, redis_prefix, "2")
    await swap(models_dir)
    newcomer, rollout = await start()
    await asyncio.sleep(0.6)  # several watch ticks: the first replica rewrites, the newcomer follows
    swapped = hashlib.sha256(SWAPPED).hexdigest()
    assert newcomer.active("fraud").version == "1" and newcomer.active("fraud").digest != swapped
    assert newcomer.pinned("fraud") is None  # the pin names the original file: not this one
    assert "not the digest the fleet's records name" in (rollout.problem() or ""), rollout.problem()


async def test_without_the_rewrite_a_new_replica_would_serve_the_swapped_file(
    start: Start, models_dir: Path, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation check: records read as they are (a digest-less pin vouches for nothing)."""

    async def as_read(self: Rollout, name: str, latest: object, pin: object) -> tuple[object, object]:
        return latest, pin

    def vouch_as_before(self: ModelRegistry, ref: ModelRef, sha256: str) -> None:
        if sha256:
            original_vouch(self, ref, sha256)

    original_vouch = ModelRegistry.vouch
    monkeypatch.setattr(Rollout, "_digested", as_read)
    monkeypatch.setattr("shared.fleet.versions.legacy", lambda record: False)
    monkeypatch.setattr(ModelRegistry, "vouch", vouch_as_before)
    publish_version(DirectoryRepository(models_dir), ModelRef("fraud", "2"), ORIGINAL)
    first, _ = await start()
    await first.pin("fraud", "2")
    await write_legacy_pin(redis_url, redis_prefix, "2")
    await swap(models_dir)
    newcomer, _ = await start()
    await asyncio.sleep(0.3)
    assert newcomer.active("fraud").digest == hashlib.sha256(SWAPPED).hexdigest()


async def test_a_record_without_a_digest_vouches_only_for_a_version_already_served(models_dir: Path) -> None:
    """What a shadow or canary record from before digests meets (shared/fleet/traffic.py vouches the same way)."""
    from shared.errors import ModelInvalid

    publish_version(DirectoryRepository(models_dir), ModelRef("fraud", "2"), ORIGINAL)
    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(max_size=8), keep_versions=1)
    await registry.load_all()
    try:
        assert registry.loaded_versions("fraud") == ["2"]
        registry.vouch(ModelRef("fraud", "2"), "")  # served here: the file it loaded stands
        with pytest.raises(ModelInvalid, match="names no digest"):
            registry.vouch(ModelRef("fraud", "1"), "")  # not served here: whatever is under it would load
    finally:
        await registry.aclose()
