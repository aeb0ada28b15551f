"""Every queue batch settles inside its budget: the host renews no lock of a batch invocation
(docs/platform.md P1), so a slow review, a full model queue, a hung store or a retrying publisher
must not hold the batch past the lock. What did not finish fails and is redelivered."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from shared.adapters.queue.budget import BatchBudget, by
from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.idempotency import MemoryResultStore
from shared.adapters.queue.messages import Incoming, Outbound
from shared.adapters.queue.publisher import MemoryPublisher
from shared.adapters.queue.replay import replay
from shared.core.limits import Limits
from shared.core.service import ScoringService
from shared.domain.events import PaymentEvent
from shared.errors import DeadlineExceeded, Overloaded
from shared.settings import ReviewPolicy, Settings, SettingsError
from tests.conftest import event

BUDGET = BatchBudget(total_s=0.6, publish_s=0.2)


def messages(n: int) -> list[Incoming]:
    return [Incoming(message_id=f"b-{i}", body=json.dumps(event(event_id=f"b-{i}")).encode()) for i in range(n)]


@dataclass
class StalledCore:
    """A core whose every `score` outlasts any budget, or answers Overloaded forever; it records the waits asked for."""

    overloaded: bool = False
    limits: Limits = field(default_factory=lambda: Limits.of(Settings()))
    review_waits: list[float] = field(default_factory=list)

    async def score(self, event: PaymentEvent, **options: Any) -> Any:
        self.review_waits.append(options["review_wait_s"])
        if self.overloaded:
            raise Overloaded("model queue full")
        await asyncio.sleep(30)

    def report(self, component: str, problem: str | None) -> None:
        return None


class SlowPublisher(MemoryPublisher):
    async def publish(self, messages: Sequence[Outbound]) -> None:
        await asyncio.sleep(30)  # an SDK retrying a broker that does not answer


class SlowStore(MemoryResultStore):
    async def find(self, event_ids: Sequence[str]) -> list[bytes | None]:
        await asyncio.sleep(30)
        return [None] * len(event_ids)


def over(
    core: Any, *, store: MemoryResultStore | None = None, publisher: MemoryPublisher | None = None
) -> QueueHandler:
    async def get() -> Any:
        return core

    store, publisher = store or MemoryResultStore(), publisher or MemoryPublisher()
    return QueueHandler(get, store, publisher, max_message_bytes=256 * 1024, budget=BUDGET)


async def timed(batch: QueueHandler, incoming: list[Incoming]) -> tuple[float, list[str], list[str | None]]:
    t0 = time.perf_counter()
    handled = await batch.handle(incoming)
    return time.perf_counter() - t0, [h.outcome for h in handled], [h.reason for h in handled]


async def test_scoring_that_outlasts_the_budget_fails_the_batch_before_the_budget_ends() -> None:
    core = StalledCore()
    elapsed, outcomes, reasons = await timed(over(core), messages(4))
    assert elapsed < BUDGET.total_s
    assert outcomes == ["failed"] * 4
    assert all(r is not None and r.startswith("deadline_exceeded") for r in reasons)


async def test_a_review_never_holds_an_event_past_the_scoring_share_of_the_budget() -> None:
    core = StalledCore()
    assert core.limits.review_queue_wait_s > BUDGET.total_s  # 5 s of review wait asked for
    await timed(over(core), messages(2))
    assert core.review_waits and max(core.review_waits) <= BUDGET.total_s - BUDGET.publish_s


async def test_a_full_model_queue_is_waited_out_only_within_the_budget() -> None:
    elapsed, outcomes, reasons = await timed(over(StalledCore(overloaded=True)), messages(3))
    assert elapsed < BUDGET.total_s
    assert outcomes == ["failed"] * 3 and all(r is not None and r.startswith("overloaded") for r in reasons)


async def test_a_hung_result_store_fails_the_batch_within_the_budget(service: ScoringService) -> None:
    elapsed, outcomes, reasons = await timed(over(service, store=SlowStore()), messages(3))
    assert elapsed < BUDGET.total_s
    assert outcomes == ["failed"] * 3 and all(r is not None and "QUEUE_BATCH_BUDGET_MS" in r for r in reasons)


async def test_a_publish_that_outlasts_the_budget_fails_what_it_carried(service: ScoringService) -> None:
    elapsed, outcomes, reasons = await timed(over(service, publisher=SlowPublisher()), messages(3))
    assert elapsed < BUDGET.total_s + 0.1
    assert outcomes == ["failed"] * 3
    assert all(r is not None and r.startswith("publish_failed") and "budget" in r for r in reasons)


async def test_a_batch_within_its_budget_completes(service: ScoringService) -> None:
    elapsed, outcomes, _ = await timed(over(service), messages(8))
    assert outcomes == ["completed"] * 8 and elapsed < BUDGET.total_s


def test_the_budget_comes_from_the_settings_with_a_sixth_kept_for_publishing() -> None:
    budget = BatchBudget.of(Settings(queue_batch_budget_ms=60_000).queue_batch_budget_ms)
    assert (budget.total_s, budget.publish_s) == (60.0, 10.0)
    with pytest.raises(ValueError, match="publish_s"):
        BatchBudget(total_s=1.0, publish_s=1.0)


def test_a_review_wait_longer_than_the_batch_budget_is_refused() -> None:
    with pytest.raises(SettingsError, match="LLM_QUEUE_TIMEOUT_MS"):
        Settings(queue_batch_budget_ms=6_000, review=ReviewPolicy(queue_timeout_ms=6_000))
    with pytest.raises(SettingsError, match="QUEUE_BATCH_BUDGET_MS"):
        Settings(queue_batch_budget_ms=300_000)


class CountingBatch:
    """Records how many batches run at once."""

    def __init__(self) -> None:
        self.running = self.most = 0

    async def handle(self, incoming: Sequence[Incoming]) -> list[Any]:
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1
        return []


async def test_replay_runs_one_batch_at_a_time_as_the_host_does() -> None:
    batch = CountingBatch()
    await replay(batch, messages(64 * 4), [])  # type: ignore[arg-type]
    assert batch.most == 1


async def test_work_past_its_share_of_the_budget_ends_then_naming_the_step() -> None:
    loop = asyncio.get_running_loop()
    assert await by(loop.time() + 1.0, asyncio.sleep(0, "done"), "keeping results") == "done"
    started = loop.time()
    with pytest.raises(DeadlineExceeded, match="keeping results outlasted the queue batch budget"):
        await by(started + 0.1, asyncio.sleep(60), "keeping results")
    assert loop.time() - started < 0.5
