"""A 30 s Redis outage in the middle of a stream of payments on the queue path.

Redis (features, cache, and the result store every replica shares) is cut at a TCP proxy for
30 s while the stream flows: every connection refused and reset, as a failover or a network
partition would. The queue is driven as the host drives it (batches of 64, a raise abandons,
dead-letter after 5 deliveries) with the production batch budget (QUEUE_BATCH_BUDGET_MS 60 s).
A batch that meets the outage holds, its locks held and no delivery count spent, and goes on when
Redis answers again: no valid payment is dead-lettered, and each result is published exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from shared.settings import Settings
from tests.faults.conftest import over_redis, seeded
from tests.faults.proxy import Proxy
from tests.faults.rig import Queue, Replica, payment
from tests.faults.servers import RedisServer

OUTAGE_S = 30.0


async def test_a_30_s_redis_outage_mid_stream_dead_letters_nothing_and_publishes_each_result_once(
    settings: Settings, own_redis: Callable[..., RedisServer], replicas: Callable[..., Replica], queue: Queue
) -> None:
    redis = own_redis()
    with Proxy(("127.0.0.1", redis.port)) as proxy:
        replica = replicas(over_redis(settings, await seeded(f"redis://127.0.0.1:{proxy.port}/0")))
        await replica.start()
        queue.send([payment(f"s-{i}", i) for i in range(64 * 6)])
        for _ in range(2):  # the stream flows
            assert await queue.deliver(replica.handlers)

        proxy.mode("reset")
        cut = time.monotonic()

        async def heal() -> None:
            await asyncio.sleep(OUTAGE_S)
            proxy.mode("pass")

        healing = asyncio.get_running_loop().create_task(heal())
        held = await queue.deliver(replica.handlers)  # meets the outage: holds until Redis is back
        waited = time.monotonic() - cut
        await healing
        await queue.drain(replica.handlers)

    assert held and waited >= OUTAGE_S * 0.9, f"the batch gave up after {waited:.1f} s of a {OUTAGE_S:.0f} s outage"
    assert queue.abandoned == 0 and queue.dead == []  # no delivery spent, nothing dead-lettered
    results = queue.results()  # exactly one result per payment (asserted inside)
    assert len(results) == 64 * 6 and queue.republished_identically()
