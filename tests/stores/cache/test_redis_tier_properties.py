"""Corrupt bytes in a real Redis, under the keys the service reads, read through the Redis tier
and every reader of it: each is a miss (or the value it validly encodes), never an error."""

from __future__ import annotations

import asyncio
import struct
from typing import get_args

import msgspec
import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from shared.domain.answers import ReviewStatus
from shared.features.store import SCHEMA_KEY, FeatureStore, encode_user, user_key
from shared.review.store import ReviewStore
from shared.stores.cache import codec
from shared.stores.cache.predictions import PredictionCache
from shared.stores.cache.redis_tier import RedisTier
from shared.stores.control import RedisControlStore
from tests.strategies import corrupted

SCORE = struct.Struct("<d")
FALLBACK = {"known": 1.0}

# Valid encodings of what each reader expects, and of what it does not, as seeds to corrupt.
seeds = st.sampled_from(
    [
        encode_user({"user_age": 30.0, "user_avg_amount_30d": 54.2, "user_txn_count_24h": 3.0}),
        encode_user({f"f{i}": i for i in range(20)}),
        codec.encode(SCORE.pack(0.25)),
        codec.encode(orjson.dumps({"event_id": "e", "review": "fraud" * 30})),
        codec.encode(orjson.dumps({"event_id": "e", "status": "pending", "id": "e", "reason": "fraud" * 30})),
        codec.encode(orjson.dumps(["user_age", "user_txn_count_24h"])),
        codec.encode(b"[" * 200, compress_min_bytes=0),
    ]
)
stored = st.binary(max_size=300) | seeds.flatmap(corrupted) | seeds


def expected_object(raw: bytes) -> object:
    payload = codec.decode(raw)
    try:
        return orjson.loads(payload) if payload is not None else None
    except orjson.JSONDecodeError:
        return None


def _a_record(value: object) -> bool:
    """A JSON object that is a review record (a pending one, as the seed)."""
    if not isinstance(value, dict) or set(value) != {"event_id", "status", "id", "reason"}:
        return False
    return all(isinstance(v, str) and v for v in value.values()) and value["status"] in get_args(ReviewStatus)


# NOTE: a third of the profile's examples: each one is four round-trips with up to 12 values.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=settings().max_examples // 3)
@given(st.lists(stored, min_size=1, max_size=12))
@example([codec.LZ4, codec.LZ4 + b"\x05", b"\x02", b""])  # regression: the first two raised ValueError
def test_corrupt_values_in_redis_read_as_misses(redis_url: str, redis_prefix: str, values: list[bytes]) -> None:
    asyncio.run(_read_back(redis_url, redis_prefix, values))


async def _read_back(url: str, prefix: str, values: list[bytes]) -> None:
    client = Redis.from_url(url)
    tier = RedisTier.from_url(url, timeout_s=2.0, prefix=prefix)
    control = RedisControlStore(Redis.from_url(url), prefix=prefix)
    users = [f"u{i}" for i in range(len(values))]
    writes = {prefix + user_key(u): v for u, v in zip(users, values, strict=True)}
    writes |= {prefix + f"pred:m:1:{i}": v for i, v in enumerate(values)}
    writes |= {prefix + f"review:e{i}": v for i, v in enumerate(values)}
    writes[prefix + SCHEMA_KEY] = values[0]
    try:
        await client.mset(writes)  # type: ignore[arg-type]

        store = FeatureStore(redis=tier, fallback={u: FALLBACK for u in users}, l1_size=0, l1_ttl_s=1.0)
        found = await store.get_many(users)
        for user, raw in zip(users, values, strict=True):
            valid = expected_object(raw)
            assert found[user] == (valid if isinstance(valid, dict) else FALLBACK), raw

        catalogue = await store.catalogue()
        names = expected_object(values[0])
        assert catalogue == (frozenset(map(str, names)) if isinstance(names, list) else None)

        predictions = PredictionCache(l1_size=0, l1_ttl_s=1.0, l2=tier, l2_ttl_s=60.0)
        scores = await predictions.get_l2([f"pred:m:1:{i}" for i in range(len(values))])
        for score, raw in zip(scores, values, strict=True):
            payload = codec.decode(raw)
            assert score == (SCORE.unpack(payload)[0] if payload is not None and len(payload) == 8 else None) or (
                score != score  # NaN: eight bytes are always some double
            )

        reviews = ReviewStore(control, 60.0)
        for i, raw in enumerate(values):
            record = await reviews.get(f"e{i}")
            valid = expected_object(raw)
            assert record is None or (isinstance(valid, dict) and valid["event_id"] == record.event_id)
            if _a_record(valid):
                assert record is not None and msgspec.to_builtins(record) == valid  # a record reads back whole

        assert tier.stats.errors == 0 and tier.problem() is None  # corrupt data is no Redis failure
        assert reviews.problem() is None
    finally:
        await client.delete(*writes)
        await tier.aclose()
        await control.aclose()
        await client.aclose()


async def test_a_key_of_another_type_reads_as_a_miss(redis_url: str, redis_prefix: str, redis_client: Redis) -> None:
    """A hash, list or set under a key the tier reads (a foreign writer): MGET answers nil, a miss."""
    tier = RedisTier.from_url(redis_url, timeout_s=2.0, prefix=redis_prefix)
    await redis_client.hset(redis_prefix + user_key("h"), mapping={"user_age": "30"})
    await redis_client.rpush(redis_prefix + user_key("l"), b"\x00{}")
    await redis_client.sadd(redis_prefix + SCHEMA_KEY, "user_age")
    try:
        store = FeatureStore(redis=tier, fallback={"h": FALLBACK}, l1_size=0, l1_ttl_s=1.0)
        assert await store.get_many(["h", "l"]) == {"h": FALLBACK, "l": {}}
        assert await store.catalogue() is None
        assert tier.stats.errors == 0
    finally:
        await tier.aclose()
