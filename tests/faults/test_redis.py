"""Redis misbehaves under load: stopped, slow, evicting, flushed (a redis-server of the test's own).

Redis is the feature store, the L2 cache, the review store and the queue's result store. For
each fault: every HTTP answer is a 200 (user features on their model defaults while Redis
cannot give them), every payment on the queue ends in exactly one published result,
`/api/health/ready` and `/api/metrics` (`scoring_degraded`) name what is degraded, and the
same service object serves normally again once the fault clears, which both then show.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
from redis.asyncio import Redis

from shared.core.service import ScoringService
from shared.settings import Settings
from tests.faults.conftest import over_redis, seeded
from tests.faults.proxy import Proxy
from tests.faults.rig import HANG_S, Queue, Replica, eventually, payment, same_as
from tests.faults.servers import RedisServer

Replicas = Callable[[Settings], Replica]
OwnRedis = Callable[..., RedisServer]


def defaulted(answers: list[httpx.Response]) -> int:
    """How many answers scored on a model default for a user feature (asserting each is a 200)."""
    assert [r.status_code for r in answers if r.status_code != 200] == []
    return sum(1 for r in answers if r.json()["defaulted"])


async def degraded_by(replica: Replica, component: str) -> bool:
    """Readiness (200) lists `component`, and the metric says so too."""
    listed = any(reason.startswith(f"{component}: ") for reason in await replica.degraded())
    return listed and await replica.metric("scoring_degraded", scoring_component=component) == 1


async def recovered(replica: Replica, reference: ScoringService, tag: str) -> None:
    """Under fresh traffic, readiness and the metric come back clean, and every answer is right again."""
    rounds = iter(range(1000))

    async def clean() -> bool:
        answers = await replica.load(f"{tag}-{next(rounds)}", 100)
        if defaulted(answers) or await replica.degraded() or await replica.metric("scoring_degraded") != 0:
            return False
        assert await same_as(reference, replica, answers)
        return True

    await eventually(clean, 30.0, "recovery")


async def healthy_baseline(replica: Replica, queue: Queue) -> None:
    assert defaulted(await replica.load("before", 100)) == 0
    assert await replica.degraded() == []
    queue.send([payment(f"q-before-{i}", i) for i in range(16)])
    await queue.drain(replica.handlers)


async def test_redis_stopped_mid_load(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, queue: Queue, reference: ScoringService
) -> None:
    redis = own_redis()
    replica = replicas(over_redis(settings, await seeded(redis.url)))
    service = await replica.start()
    await healthy_baseline(replica, queue)
    failed_before = await replica.metric("scoring_queue_messages_total", scoring_outcome="failed")

    during = await replica.load("during", 300, midway=lambda: asyncio.to_thread(redis.kill))
    assert defaulted(during) > 0  # every answer a 200; those after the stop on model defaults
    assert not await same_as(reference, replica, [r for r in during if r.json()["defaulted"]])  # the check sees it
    assert await degraded_by(replica, "redis")
    queue.send([payment(f"q-down-{i}", i) for i in range(16)])
    # the result store is down: the batch holds (its locks held, no delivery spent) until Redis is back
    delivery = asyncio.get_running_loop().create_task(queue.deliver(replica.handlers))
    await asyncio.sleep(1.5)
    assert not delivery.done(), "the batch gave up on an outage far inside its budget"

    await asyncio.to_thread(redis.start)  # back, empty (no persistence): the feature pipeline writes again
    await seeded(redis.url)
    assert await delivery and queue.abandoned == 0  # one delivery, completed
    assert await replica.metric("scoring_queue_messages_total", scoring_outcome="failed") == failed_before
    assert len(queue.results()) == 32 and queue.republished_identically()
    await recovered(replica, reference, "after")
    assert replica.service is service  # no restart


async def test_redis_slow(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, queue: Queue, reference: ScoringService
) -> None:
    """Every answer from Redis takes 0.6 s (a proxy in between): past the cache's 250 ms budget,
    inside the result store's 2 s."""
    redis = own_redis()
    with Proxy(("127.0.0.1", redis.port)) as proxy:
        replica = replicas(over_redis(settings, await seeded(f"redis://127.0.0.1:{proxy.port}/0")))
        service = await replica.start()
        await healthy_baseline(replica, queue)

        proxy.mode("delay", delay_s=0.6)
        during = await replica.load("during", 100)
        assert defaulted(during) > 0 and replica.slowest_s < HANG_S  # a timeout, then Redis skipped: no pile-up
        assert await degraded_by(replica, "redis")
        queue.send([payment(f"q-slow-{i}", i) for i in range(16)])
        await queue.drain(replica.handlers)  # slower, and complete

        proxy.mode("pass")
        await recovered(replica, reference, "after")
        assert len(queue.results()) == 32 and queue.republished_identically()
        assert replica.service is service
        assert set(replica.statuses) == {200} and replica.slowest_s < HANG_S


async def features_defaulted(replica: Replica) -> bool:
    """Readiness lists the features as defaulted (a window of 100 events filled under the fault)."""
    assert defaulted(await replica.load("window", 100)) > 0
    ratio = await replica.metric("scoring_features_defaulted_ratio")
    return await degraded_by(replica, "features") and ratio >= 0.5


async def test_redis_evicting(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, queue: Queue, reference: ScoringService
) -> None:
    """Redis at its maxmemory under allkeys-lru while a neighbour writes 3 MB: users' features,
    kept results and model records are evicted. Scoring goes on, on defaults, and says so."""
    redis = own_redis("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    replica = replicas(over_redis(settings, await seeded(redis.url)))
    service = await replica.start()
    await healthy_baseline(replica, queue)
    neighbour = Redis.from_url(redis.url)

    async def squeeze() -> None:
        for chunk in range(12):
            await neighbour.mset({f"neighbour:{chunk}:{i}": b"x" * 8192 for i in range(32)})

    during = await replica.load("during", 200, midway=squeeze)
    assert defaulted(during) > 0
    assert int((await neighbour.info("stats"))["evicted_keys"]) > 0
    await eventually(lambda: features_defaulted(replica), 10.0, "features listed as defaulted")
    queue.lose_completions()  # the kept results were evicted too: the redelivery scores again
    queue.send([payment(f"q-evicted-{i}", i) for i in range(16)])
    await queue.drain(replica.handlers)
    assert len(queue.results()) == 32  # one per payment still (duplicate detection drops the re-scores)

    await neighbour.delete(*[k async for k in neighbour.scan_iter(match="neighbour:*", count=1000)])
    await neighbour.aclose()
    await seeded(redis.url)
    await recovered(replica, reference, "after")
    assert replica.service is service
    assert set(replica.statuses) == {200} and replica.slowest_s < HANG_S


async def test_redis_flushed_mid_load(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, queue: Queue, reference: ScoringService
) -> None:
    """FLUSHDB mid-load: every user's features, kept result, review and model record gone at once."""
    redis = own_redis()
    replica = replicas(over_redis(settings, await seeded(redis.url)))
    service = await replica.start()
    await healthy_baseline(replica, queue)
    client = Redis.from_url(redis.url)

    async def flush() -> None:
        await client.flushdb()

    during = await replica.load("during", 200, midway=flush)
    assert defaulted(during) > 0
    await eventually(lambda: features_defaulted(replica), 10.0, "features listed as defaulted")
    queue.lose_completions()  # their kept results are gone: the redelivery scores again
    queue.send([payment(f"q-flushed-{i}", i) for i in range(16)])
    await queue.drain(replica.handlers)
    assert len(queue.results()) == 32

    await seeded(redis.url)  # the feature pipeline writes again
    await client.aclose()
    await recovered(replica, reference, "after")
    assert replica.service is service
    assert set(replica.statuses) == {200} and replica.slowest_s < HANG_S
