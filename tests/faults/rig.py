"""One replica as a fault test drives it: its HTTP app, its queue function, a queue, and what it reports.

    Replica     the Functions handlers over one lazily built service (as `function_app.py` builds
                them), with the Starlette app on an in-process httpx client: load, readiness, metrics
    Queue       a Service Bus queue as the host drives a batch function on it: peek-lock, batches of
                up to 64, a raise abandons the batch, a lost lock (a worker gone) redelivers it,
                dead-letter after 5 deliveries; the publisher is the output queue (duplicate detection)

The results' exactly-once check reads what the output queue keeps (`MemoryPublisher.delivered`:
the first message of each message id, as duplicate detection does).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from azure.functions.servicebus import ServiceBusMessage
from prometheus_client.parser import text_string_to_metric_families

from shared.adapters.functions import FunctionHandlers
from shared.adapters.http.app import create_app
from shared.adapters.queue.handler import COMPLETED_QUEUE
from shared.adapters.queue.publisher import MemoryPublisher, Publisher
from shared.core.holder import ServiceHolder
from shared.core.service import ScoringService
from shared.domain.events import decode_event
from shared.errors import ScoringError
from shared.settings import Settings
from tests.conftest import event

__all__ = ["HANG_S", "Queue", "Replica", "eventually", "payment", "same_as"]

HANG_S = 3.0  # no HTTP answer may take this long, whatever the fault (each fault's own bound is far below)
USERS = [f"u{i:03d}" for i in range(40)]
FEATURES = {u: {"user_avg_amount_30d": 40.0 + i, "user_txn_count_24h": float(i % 7)} for i, u in enumerate(USERS)}


def payment(event_id: str, i: int = 0, **fields: object) -> dict[str, object]:
    """A valid event of a known user (one of USERS), its amount unique to `i`."""
    return event(event_id=event_id, user_id=USERS[i % len(USERS)], amount=10.0 + i * 1.25, **fields)


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float = 15.0, what: str = "it") -> None:
    """Wait (polling every 20 ms) until `check()` holds; fail after `within_s`."""
    deadline = time.monotonic() + within_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.02)


class Replica:
    """One process's handlers (HTTP and queue) over one service built from `settings`."""

    def __init__(self, settings: Settings, publisher: Publisher) -> None:
        self.holder = ServiceHolder(lambda: settings)
        self.handlers = FunctionHandlers(self.holder, publisher=publisher)
        transport = httpx.ASGITransport(app=create_app(self.holder))
        self.client = httpx.AsyncClient(transport=transport, base_url="http://replica", timeout=30)
        self.statuses: list[int] = []  # every HTTP status answered, in order
        self._made = 0  # events made so far: each load's events are new (no cached prediction hides a fault)
        self.sent: dict[str, dict[str, object]] = {}  # every event scored, by event id
        self.slowest_s = 0.0  # the longest any HTTP answer took: a hang shows here

    async def start(self) -> ScoringService:
        return await self.holder.get()

    @property
    def service(self) -> ScoringService:
        service = self.holder.peek()
        assert service is not None, "not started"
        return service

    async def score(self, body: dict[str, object]) -> httpx.Response:
        self.sent[str(body["event_id"])] = body
        started = time.monotonic()
        response = await self.client.post("/api/score", json=body)
        self.slowest_s = max(self.slowest_s, time.monotonic() - started)
        self.statuses.append(response.status_code)
        return response

    async def load(
        self, tag: str, count: int, *, concurrency: int = 8, midway: Callable[[], Awaitable[None]] | None = None
    ) -> list[httpx.Response]:
        """`count` scores from `concurrency` clients; `midway()` runs once half of them are answered
        (the fault strikes mid-load), while the rest keep coming."""
        answered: list[httpx.Response] = []
        half = asyncio.Event()
        todo = iter(range(self._made, self._made + count))
        self._made += count

        async def client() -> None:
            for i in todo:
                answered.append(await self.score(payment(f"{tag}-{i}", i)))
                if len(answered) >= count // 2:
                    half.set()
                await asyncio.sleep(0)

        async def strike() -> None:
            await half.wait()
            if midway is not None:
                await midway()

        striker = asyncio.get_running_loop().create_task(strike())
        await asyncio.gather(*(client() for _ in range(concurrency)))
        if not striker.done():
            striker.cancel()
        else:
            striker.result()
        return answered

    async def readiness(self) -> tuple[int, dict[str, object]]:
        response = await self.client.get("/api/health/ready")
        return response.status_code, response.json()

    async def degraded(self) -> list[str]:
        """What `GET /api/health/ready` lists as degraded (asserting it still answers 200)."""
        status, body = await self.readiness()
        assert status == 200, body
        return list(body.get("degraded", []))  # type: ignore[call-overload]

    async def metric(self, name: str, **labels: str) -> float:
        """The value of a series of `GET /api/metrics` (summed over the series matching `labels`)."""
        response = await self.client.get("/api/metrics")
        assert response.status_code == 200
        found = 0.0
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    found += sample.value
        return found

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.handlers.aclose()


async def same_as(reference: ScoringService, replica: Replica, answers: Sequence[httpx.Response]) -> bool:
    """Whether each answer is the score `reference` (the users' features from a file, no Redis) gives
    its event: every user got their own features (no answer read for another request, late)."""
    for answer in answers:
        body = answer.json()
        expected = await reference.score(decode_event(json.dumps(replica.sent[body["event_id"]]).encode()))
        if round(expected.risk_score, 6) != body["risk_score"]:
            return False
    return True


@dataclass
class Message:
    body: bytes
    message_id: str
    delivery_count: int = 1
    enqueued: datetime = field(default_factory=lambda: datetime.now(UTC))

    def binding(self) -> ServiceBusMessage:
        """What the Functions host hands the function for this delivery."""
        return ServiceBusMessage(
            body=self.body,
            message_id=self.message_id,
            delivery_count=self.delivery_count,
            enqueued_time_utc=self.enqueued,
            user_properties={},
            application_properties={},
        )


class Queue:
    """`payments` with peek-lock, as the host drives a batch function (autoCompleteMessages)."""

    def __init__(self, publisher: MemoryPublisher, *, batch_size: int = 64, max_deliveries: int = 5) -> None:
        self.publisher = publisher  # the output queues (risk-completed, risk-rejected)
        self.batch_size = batch_size
        self.max_deliveries = max_deliveries
        self.pending: deque[Message] = deque()
        self.dead: list[Message] = []
        self.completed: list[Message] = []
        self.sent: list[str] = []  # every event id sent in
        self.abandoned = 0  # batches that raised

    def send(self, bodies: Sequence[dict[str, object]]) -> None:
        for body in bodies:
            self.sent.append(str(body["event_id"]))
            self.pending.append(Message(json.dumps(body).encode(), str(body["event_id"])))

    def send_raw(self, body: bytes, message_id: str = "") -> None:
        """One message as a producer sent it (any body; the MessageId it set, or none)."""
        self.pending.append(Message(body, message_id))

    def receive(self) -> list[Message]:
        """The next batch, locked."""
        return [self.pending.popleft() for _ in range(min(self.batch_size, len(self.pending)))]

    def redeliver(self, batch: list[Message]) -> None:
        """Abandoned, or its lock expired: each message comes back (or dead-letters)."""
        for msg in batch:
            msg.delivery_count += 1
            (self.pending if msg.delivery_count <= self.max_deliveries else self.dead).append(msg)

    async def deliver(self, handlers: FunctionHandlers) -> bool:
        """One batch to the function: completed when it returns, abandoned when it raises."""
        batch = self.receive()
        try:
            await handlers.payments([m.binding() for m in batch])
        except ScoringError:
            self.abandoned += 1
            self.redeliver(batch)
            return False
        self.completed += batch
        return True

    def lose_completions(self) -> None:
        """The worker died after handling its batches but before completing them: their locks
        expire and Service Bus delivers every one of them again."""
        batch, self.completed = self.completed, []
        self.redeliver(batch)

    async def drain(self, handlers: FunctionHandlers, *, rounds: int = 20) -> None:
        """Deliver until the queue is empty (a failed batch comes back), at most `rounds` batches."""
        for _ in range(rounds):
            if not self.pending:
                return
            await self.deliver(handlers)
        raise AssertionError(f"{len(self.pending)} messages still pending after {rounds} deliveries")

    def results(self) -> dict[str, bytes]:
        """What risk-completed keeps, by event id: exactly one per payment, or the check fails."""
        kept = self.publisher.delivered(COMPLETED_QUEUE)
        ids = [m.message_id for m in kept]
        assert len(ids) == len(set(ids))
        assert sorted(ids) == sorted(set(self.sent)), (
            f"missing {sorted(set(self.sent) - set(ids))[:5]}, extra {sorted(set(ids) - set(self.sent))[:5]}"
        )
        assert self.dead == [], f"{len(self.dead)} messages dead-lettered"
        return {m.message_id: m.body for m in kept}

    def republished_identically(self) -> bool:
        """Whether every publish of a payment carried the same bytes (the kept result)."""
        bodies: dict[str, set[bytes]] = {}
        for m in self.publisher.sent:
            if m.queue == COMPLETED_QUEUE:
                bodies.setdefault(m.message_id, set()).add(m.body)
        return all(len(b) == 1 for b in bodies.values())
