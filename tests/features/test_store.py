from shared.features.store import FeatureStore, seed_redis
from shared.stores.cache.redis_tier import RedisTier


async def test_file_fallback_without_redis() -> None:
    store = FeatureStore(redis=None, fallback={"u1": {"x": 1.0}}, l1_size=10, l1_ttl_s=5)
    assert await store.get("u1") == ({"x": 1.0}, None)
    assert await store.get("u1") == ({"x": 1.0}, "l1")
    assert await store.get("nobody") == ({}, None)


async def test_redis_online_store_one_value_per_user(redis_url: str, redis_prefix: str, redis_client) -> None:
    users = {f"u{i}": {"user_avg_amount_30d": 10.0 + i, "user_txn_count_24h": float(i)} for i in range(50)}
    assert await seed_redis(redis_url, users, prefix=redis_prefix) == 50
    assert await redis_client.type(redis_prefix + "user:u7") == b"string"

    tier = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    store = FeatureStore(redis=tier, fallback={"u7": {"ignored": 1.0}}, l1_size=100, l1_ttl_s=5)
    got, where = await store.get("u7")
    assert got == users["u7"] and where == "l2"
    assert await store.get("missing") == ({}, None)
    await tier.aclose()


async def test_users_of_concurrent_requests_are_one_mget(redis_url: str, redis_prefix: str) -> None:
    import asyncio

    await seed_redis(redis_url, {f"u{i}": {"f": float(i)} for i in range(8)}, prefix=redis_prefix)
    tier = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)
    store = FeatureStore(redis=tier, fallback=None, l1_size=0, l1_ttl_s=5)
    results = await asyncio.gather(*(store.get(f"u{i}") for i in range(8)))
    assert [r[0]["f"] for r in results] == [float(i) for i in range(8)]
    assert tier.stats.round_trips == 1
    await tier.aclose()
