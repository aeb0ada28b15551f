"""The queue path's own faults: the output queue's publisher failing; a worker gone between receive
and complete (its batch redelivered to a fresh replica). Results are kept in a Redis of the test's own.

Exactly one result per payment reaches risk-completed (`Queue.results`: what duplicate detection
keeps), and a republish carries the kept bytes. The crash points one by one, with fakes, are in
tests/adapters/queue/test_handler.py (`test_a_crash_at_each_point_ends_in_exactly_one_published_result`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from redis.asyncio import Redis

from bench.llm_server import LlmServer
from shared.adapters.queue.messages import Outbound
from shared.adapters.queue.publisher import MemoryPublisher
from shared.settings import Settings
from tests.faults.conftest import over_redis, seeded
from tests.faults.rig import Queue, Replica, eventually, payment
from tests.faults.servers import RedisServer

Replicas = Callable[..., Replica]
OwnRedis = Callable[..., RedisServer]


async def test_the_publisher_failing(
    settings: Settings, own_redis: OwnRedis, replicas: Replicas, queue: Queue, publisher: MemoryPublisher
) -> None:
    redis_url = await seeded(own_redis().url)
    replica = replicas(over_redis(settings, redis_url))
    service = await replica.start()
    queue.send([payment(f"q-before-{i}", i) for i in range(16)])
    await queue.drain(replica.handlers)
    failed = await replica.metric("scoring_queue_messages_total", scoring_outcome="failed")

    publisher.down = True  # the output queue cannot be reached: a short outage is waited out in the batch
    queue.send([payment(f"q-blip-{i}", 100 + i) for i in range(16)])

    async def back_after(seconds: float) -> None:
        await asyncio.sleep(seconds)
        publisher.down = False

    answers, delivered, _ = await asyncio.gather(
        replica.load("http", 200), queue.deliver(replica.handlers), back_after(1.0)
    )
    assert {r.status_code for r in answers} == {200}  # HTTP goes on
    assert delivered and queue.abandoned == 0  # held, then sent: no delivery spent
    assert await replica.metric("scoring_queue_messages_total", scoring_outcome="failed") == failed

    # an outage longer than the batch budget (the shortest the settings allow): the batch goes back
    replica = replicas(over_redis(settings, redis_url, queue_batch_budget_ms=6000))
    service = await replica.start()
    publisher.down = True
    queue.send([payment(f"q-down-{i}", 200 + i) for i in range(48)])
    assert not await queue.deliver(replica.handlers) and len(queue.pending) == 48  # abandoned: nothing lost
    assert any(r.startswith("queue: ") and "publish_failed" in r for r in await replica.degraded())
    assert await replica.metric("scoring_degraded", scoring_component="queue") == 1
    assert await replica.metric("scoring_queue_messages_total", scoring_outcome="failed") == failed + 48

    publisher.down = False
    await queue.drain(replica.handlers)
    assert len(queue.results()) == 80
    assert queue.republished_identically()  # the results were kept before the send failed
    assert await replica.degraded() == []
    assert await replica.metric("scoring_degraded", scoring_component="queue") == 0
    assert replica.service is service


class Gate(MemoryPublisher):
    """A publisher that hangs until the test kills its worker (sends nothing meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()

    async def publish(self, messages: Sequence[Outbound]) -> None:
        self.entered.set()
        await asyncio.Event().wait()


@pytest.mark.parametrize("point", ["scoring", "publishing", "completing"])
async def test_a_worker_restarted_between_receive_and_complete(
    point: str,
    settings: Settings,
    own_redis: OwnRedis,
    replicas: Replicas,
    queue: Queue,
    llm: LlmServer,
    reviewing: Callable[..., Settings],
) -> None:
    """Worker 1 dies `point`: while its batch waits for reviews (nothing kept yet), while it sends
    (results kept, none sent), or after it sent everything but before the host completed the
    messages. Their locks expire; worker 2, a fresh process, gets the batch again."""
    redis = own_redis()
    fleet = over_redis(reviewing(), await seeded(redis.url), review=reviewing().review)
    gate = Gate()
    first = replicas(fleet, gate if point == "publishing" else None)
    await first.start()
    queue.send([payment(f"q-{i}", i) for i in range(48)])
    batch = queue.receive()
    if point == "scoring":
        llm.behaviour.delay_s = 30.0  # the reviews hold the batch (LLM_QUEUE_TIMEOUT_MS)
    worker = asyncio.get_running_loop().create_task(first.handlers.payments([m.binding() for m in batch]))
    if point == "completing":
        await worker  # done, sent; the process dies before completing
    else:
        if point == "publishing":
            await asyncio.wait_for(gate.entered.wait(), 15)
        else:
            await eventually(lambda: _asked(llm, 1), 10.0, "a review asked for")
        worker.cancel()  # the process dies here
        await asyncio.gather(worker, return_exceptions=True)
    kept = await _kept(redis.url)
    assert kept == {"scoring": 0, "publishing": 48, "completing": 48}[point]
    queue.redeliver(batch)  # the locks expired
    llm.behaviour.delay_s = 0.0

    second = replicas(fleet)  # a fresh process: its own service, caches and clients
    duplicates = await second.metric("scoring_queue_messages_total", scoring_outcome="duplicate")
    await second.start()
    answers = await asyncio.gather(second.load("http", 100), queue.drain(second.handlers))
    assert {r.status_code for r in answers[0]} == {200}
    assert len(queue.results()) == 48 and queue.republished_identically()
    assert await second.metric("scoring_queue_messages_total", scoring_outcome="duplicate") == duplicates + kept
    assert await second.degraded() == []


async def _asked(llm: LlmServer, count: int) -> bool:
    return len(llm.requests) >= count


async def _kept(url: str) -> int:
    client = Redis.from_url(url)
    try:
        return len([k async for k in client.scan_iter(match="result:*", count=1000)])
    finally:
        await client.aclose()


async def test_every_rejection_reaches_risk_rejected_past_duplicate_detection(
    settings: Settings, replicas: Replicas, queue: Queue, publisher: MemoryPublisher
) -> None:
    """Envelopes and plain messages sent without a MessageId (and one whose id is what an envelope's
    first event was once named): each rejection is kept by the output queue's duplicate detection,
    and a redelivery of them all republishes under the same ids (dropped, none added)."""
    import json

    from shared.adapters.queue.messages import REJECTED_QUEUE

    replica = replicas(settings)
    await replica.start()
    for k in range(3):
        items = [
            payment(f"env-{k}", k),
            {**payment(f"bad-{k}-a", k), "amount": -1},
            payment(f"bad-{k}-b", k, currency="x"),
        ]
        queue.send_raw(json.dumps({"events": items}).encode())
    for k in range(3):
        queue.send_raw(json.dumps({**payment(f"plain-bad-{k}", k), "amount": -1}).encode())
    queue.send_raw(b"{not json", message_id="#1")
    await queue.drain(replica.handlers)
    kept = publisher.delivered(REJECTED_QUEUE)
    assert len(kept) == 10, sorted(m.message_id for m in kept)
    assert sorted(json.loads(m.body)["message_id"] for m in kept) == sorted(["#1", "#2"] * 3 + [""] * 3 + ["#1"])
    queue.lose_completions()  # every message delivered again: the same rejections, the same ids
    await queue.drain(replica.handlers)
    assert len(publisher.delivered(REJECTED_QUEUE)) == 10
    assert len([m for m in publisher.sent if m.queue == REJECTED_QUEUE]) == 20
