"""The tiered cache against a real Redis (and a black-hole socket for 'slow')."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator

import pytest
from msgspec import to_builtins

from shared.stores.cache import codec
from shared.stores.cache.l1 import TtlLru
from shared.stores.cache.redis_tier import RedisTier
from shared.stores.cache.tiered import TieredCache
from tests.conftest import closed_port

SCORE = struct.Struct("<d")


def make_cache(l2: RedisTier | None, *, l1: bool = True) -> TieredCache[float]:
    return TieredCache(
        "predictions",
        l1=TtlLru(100, 60) if l1 else None,
        l2=l2,
        l2_ttl_s=60,
        dump=SCORE.pack,
        load=lambda b: SCORE.unpack(b)[0],
    )


class Counter:
    def __init__(self, value: float = 0.5, delay: float = 0.0) -> None:
        self.calls = 0
        self.value = value
        self.delay = delay

    async def __call__(self) -> float:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return self.value


@pytest.fixture
def tier(redis_url: str, redis_prefix: str) -> Iterator[RedisTier]:
    yield RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)


async def settle(tier: RedisTier) -> None:
    await tier.flush()


async def test_miss_computes_once_then_l1_hits(tier: RedisTier) -> None:
    cache, compute = make_cache(tier), Counter(0.25)
    assert await cache.get_or_compute("k", compute) == (0.25, None)
    assert await cache.get_or_compute("k", compute) == (0.25, "l1")
    assert compute.calls == 1
    assert to_builtins(cache.stats) == {"l1_hits": 1, "l2_hits": 0, "misses": 1}
    await tier.aclose()


async def test_value_written_to_redis_is_marker_encoded_and_read_by_another_replica(
    tier: RedisTier, redis_client, redis_prefix: str, redis_url: str
) -> None:
    await make_cache(tier).get_or_compute("k", Counter(0.75))
    await settle(tier)
    stored = await redis_client.get(redis_prefix + "k")
    assert stored == codec.RAW + SCORE.pack(0.75)
    assert 0 < await redis_client.pttl(redis_prefix + "k") <= 60_000

    other = RedisTier.from_url(redis_url, timeout_s=0.5, prefix=redis_prefix)  # another replica: empty L1
    compute = Counter(0.1)
    assert await make_cache(other).get_or_compute("k", compute) == (0.75, "l2")
    assert compute.calls == 0
    await tier.aclose()
    await other.aclose()


async def test_evicted_key_is_a_miss_that_recomputes(tier: RedisTier, redis_client, redis_prefix: str) -> None:
    await make_cache(tier).get_or_compute("k", Counter(0.3))
    await settle(tier)
    await redis_client.delete(redis_prefix + "k")  # what allkeys-lru eviction does
    compute = Counter(0.3)
    assert await make_cache(tier, l1=False).get_or_compute("k", compute) == (0.3, None)
    assert compute.calls == 1
    await tier.aclose()


async def test_concurrent_misses_on_one_key_make_one_call(tier: RedisTier) -> None:
    cache, compute = make_cache(tier), Counter(0.9, delay=0.05)
    results = await asyncio.gather(*(cache.get_or_compute("hot", compute) for _ in range(20)))
    assert compute.calls == 1
    assert {value for value, _ in results} == {0.9}
    await tier.aclose()


async def test_reads_of_concurrent_requests_share_round_trips(tier: RedisTier) -> None:
    cache = make_cache(tier, l1=False)
    await asyncio.gather(*(cache.get_or_compute(f"k{i}", Counter(0.1)) for i in range(64)))
    assert tier.stats.reads == 64
    assert tier.stats.round_trips <= 4  # 64 reads coalesced into a few MGETs (+ the write pipeline)
    await tier.aclose()


async def test_unreachable_redis_is_a_miss_never_an_error() -> None:
    port = closed_port()
    tier = RedisTier.from_url(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    cache, compute = make_cache(tier, l1=False), Counter(0.4)
    assert await cache.get_or_compute("k", compute) == (0.4, None)
    assert await cache.get_or_compute("k", compute) == (0.4, None)
    assert tier.stats.errors >= 1
    assert tier.stats.skipped >= 1  # after the first failure Redis is skipped for a while
    await tier.aclose()


async def test_slow_redis_times_out_into_a_miss() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)  # accepts connections, never answers
    port = server.getsockname()[1]
    tier = RedisTier.from_url(f"redis://127.0.0.1:{port}/0", timeout_s=0.1)
    compute = Counter(0.6)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await make_cache(tier, l1=False).get_or_compute("k", compute) == (0.6, None)
    assert loop.time() - started < 2.0
    assert tier.stats.errors == 1
    server.close()
    await tier.aclose()


def test_entra_auth_uses_a_token_credential_provider() -> None:
    from redis_entraid.cred_provider import EntraIdCredentialsProvider

    tier = RedisTier.from_url("rediss://example.redis.azure.net:10000", timeout_s=0.1, use_entra=True)
    assert isinstance(tier._client.connection_pool.connection_kwargs["credential_provider"], EntraIdCredentialsProvider)
    assert (
        "password" not in tier._client.connection_pool.connection_kwargs
        or not tier._client.connection_pool.connection_kwargs["password"]
    )


async def test_a_stand_in_computed_during_a_redis_failure_is_not_kept() -> None:
    port = closed_port()
    tier = RedisTier.from_url(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    cache = make_cache(tier)
    assert await cache.get_or_compute("user", Counter(0.0)) == (0.0, None)
    compute = Counter(0.0)
    await cache.get_or_compute("user", compute)
    assert compute.calls == 1  # asked again, not served from L1
    await tier.aclose()
