"""The batch-shaped prediction cache and the micro-batch that uses it, against real Redis."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import numpy as np
import pytest
from msgspec import to_builtins

from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.settings import BatchPolicy, OrtOptions
from shared.stores.cache import codec
from shared.stores.cache.predictions import PredictionCache
from shared.stores.cache.redis_tier import RedisTier


def key(i: int) -> str:
    return PredictionCache.key("fraud", "1", np.full(4, i, dtype=np.float32).tobytes())


def test_keys_hold_model_version_and_row() -> None:
    row = np.ones(4, dtype=np.float32).tobytes()
    assert PredictionCache.key("fraud", "1", row) != PredictionCache.key("fraud", "2", row)
    assert PredictionCache.key("fraud", "1", row) != PredictionCache.key(
        "fraud", "1", np.zeros(4, dtype=np.float32).tobytes()
    )
    assert PredictionCache.key("fraud", "1", row).startswith("pred:fraud:1:")


async def settle(tier: RedisTier) -> None:
    await tier.flush()


async def test_store_then_read_from_another_replica(redis_url: str, redis_prefix: str, redis_client) -> None:
    tier_a = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    a = PredictionCache(l1_size=100, l1_ttl_s=30, l2=tier_a, l2_ttl_s=3600)
    a.store([(key(1), 0.25), (key(2), 0.75)])
    assert a.get_l1(key(1)) == 0.25
    await settle(tier_a)
    raw = await redis_client.get(redis_prefix + key(1))
    assert raw == codec.RAW + struct.pack("<d", 0.25)
    assert 0 < await redis_client.pttl(redis_prefix + key(1)) <= 3_600_000  # a TTL: volatile-lru may evict it

    tier_b = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    b = PredictionCache(l1_size=100, l1_ttl_s=30, l2=tier_b, l2_ttl_s=3600)
    assert b.get_l1(key(1)) is None
    assert await b.get_l2([key(1), key(3), key(2)]) == [0.25, None, 0.75]
    assert tier_b.stats.round_trips == 1
    assert b.get_l1(key(2)) == 0.75  # an L2 hit fills L1
    assert to_builtins(b.stats) == {"l1_hits": 1, "l2_hits": 2, "misses": 1}
    await tier_a.aclose()
    await tier_b.aclose()


async def test_with_a_ttl_entries_expire(redis_url: str, redis_prefix: str, redis_client) -> None:
    tier = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    PredictionCache(l1_size=0, l1_ttl_s=30, l2=tier, l2_ttl_s=120).store([(key(5), 0.5)])
    await settle(tier)
    assert 0 < await redis_client.pttl(redis_prefix + key(5)) <= 120_000
    await tier.aclose()


@pytest.fixture
async def fraud(models_dir: Path, redis_url: str, redis_prefix: str):
    tier = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    cache = PredictionCache(l1_size=1000, l1_ttl_s=30, l2=tier, l2_ttl_s=3600)
    registry = ModelRegistry(
        DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8), predictions=cache
    )
    await registry.load_all()
    yield registry.active("fraud"), tier
    await registry.aclose()
    await tier.aclose()


async def test_a_batch_is_one_mget_and_one_model_run(fraud) -> None:
    loaded, tier = fraud
    rows = [np.full(4, i, dtype=np.float32) for i in range(8)]
    before_batches, before_trips = loaded.batcher.batches, tier.stats.round_trips
    results = await asyncio.gather(*(loaded.score(r) for r in rows))
    assert {r.value.source for r in results} == {"model"}
    assert loaded.batcher.batches - before_batches == 1
    await settle(tier)
    assert tier.stats.round_trips - before_trips == 2  # one MGET, one background MSET
    assert tier.stats.writes == 8
    again = await loaded.score(rows[3])
    assert again.value.source == "l1" and again.value.score == results[3].value.score


async def test_identical_rows_in_flight_run_the_model_once(fraud) -> None:
    loaded, _ = fraud
    row = np.full(4, 42, dtype=np.float32)
    before = loaded.rows_run
    results = await asyncio.gather(*(loaded.score(row) for _ in range(8)))
    assert len({r.value.score for r in results}) == 1
    assert [r.value.source for r in results] == ["model"] * 8
    assert loaded.rows_run - before == 1  # eight requests, one model row


@pytest.mark.parametrize(
    ("policy", "inference_s", "rtt_s", "expected"),
    [
        ("always", 0.00001, 0.001, True),
        ("never", 1.0, 0.0001, False),
        ("auto", None, 0.001, True),  # not measured yet: use Redis
        ("auto", 0.00001, None, True),
        ("auto", 0.00001, 0.0002, False),  # a 10 µs model run beats a 200 µs round-trip
        ("auto", 0.005, 0.0002, True),  # a 5 ms model run does not
    ],
)
def test_redis_is_used_only_while_it_pays(
    policy: str, inference_s: float | None, rtt_s: float | None, expected: bool
) -> None:
    tier = RedisTier.from_url("redis://127.0.0.1:1/0", timeout_s=0.1)
    tier.rtt_s = rtt_s
    cache = PredictionCache(l1_size=10, l1_ttl_s=1, l2=tier, l2_ttl_s=3600, l2_policy=policy)  # type: ignore[arg-type]
    assert cache.pays(inference_s) is expected
    assert PredictionCache(l1_size=10, l1_ttl_s=1, l2=None, l2_ttl_s=3600, l2_policy="always").pays(1.0) is False


async def test_a_cheap_model_stops_using_redis_under_auto(fraud) -> None:
    loaded, tier = fraud
    await asyncio.gather(*(loaded.score(np.full(4, 100 + i, dtype=np.float32)) for i in range(8)))
    assert tier.rtt_s is not None and loaded.batch_run_s is not None
    tier.rtt_s = loaded.batch_run_s * 10  # as measured here: Redis slower than the tiny model
    await settle(tier)
    trips = tier.stats.round_trips
    results = await asyncio.gather(*(loaded.score(np.full(4, 200 + i, dtype=np.float32)) for i in range(8)))
    await settle(tier)
    assert {r.value.source for r in results} == {"model"}
    assert tier.stats.round_trips == trips  # neither read nor written
    assert loaded.describe().predictions_via_redis is False


async def test_a_re_uploaded_version_is_refused_and_its_cached_predictions_stay_its_own(models_dir: Path) -> None:
    from shared.errors import ModelInvalid
    from tests.onnx_models import make_model

    cache = PredictionCache(l1_size=100, l1_ttl_s=30, l2=None, l2_ttl_s=3600)
    registry = ModelRegistry(
        DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8), predictions=cache
    )
    await registry.load_all()
    row = np.full(4, 1, dtype=np.float32)
    before = await registry.active("fraud").score(row)
    with pytest.raises(ModelInvalid, match="its file changed after it was loaded"):  # a version's file never changes
        await registry.install("fraud", "1", make_model(bias=-40.0))
    after = await registry.active("fraud").score(row)
    assert after.value.source == "l1" and after.value.score == before.value.score
    await registry.aclose()


async def test_a_batch_lookup_checks_l1_then_the_shared_tier_once() -> None:
    from shared.stores.cache.tier import MemoryTier

    tier = MemoryTier()
    cache = PredictionCache(l1_size=100, l1_ttl_s=30, l2=tier, l2_ttl_s=3600)
    cache.store([(key(1), 0.1)], l2=False)
    tier.put(key(2), codec.encode(struct.pack("<d", 0.2)), None)
    found = await cache.lookup([key(1), key(2), key(3), key(3)], use_l2=True)
    assert found == {key(1): (0.1, "l1"), key(2): (0.2, "l2")}
    assert tier.stats.round_trips == 1 and to_builtins(cache.stats) == {"l1_hits": 1, "l2_hits": 1, "misses": 1}
    tier.down = True  # an outage reads as misses, never an error
    assert await cache.lookup([key(4)], use_l2=True) == {}
