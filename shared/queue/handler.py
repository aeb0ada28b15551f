"""One invocation's batch of payments: each gets exactly one verdict, and each result is sent once.

    decode      over MAX_MESSAGE_BYTES, bad JSON, schema violation → rejected at once (its own fault)
    look up     results kept by event_id → a duplicate republishes the kept bytes
    score       the rest concurrently, each through the core's `score` (they share model batches)
    keep        SET NX per result: the first result of a payment wins, everywhere
    publish     one send: results to risk-completed (message_id = event_id), rejections to risk-rejected

A transient failure (store down, no model ready, publishing failed) marks only the messages
it touched `failed`; the adapter raises afterwards so the host abandons the batch and Service
Bus redelivers it (dead-lettering after the queue's max delivery count). Whatever was kept
or sent before is republished byte for byte, and duplicate detection drops the republish.

Every batch settles within its `BatchBudget`. The host renews no lock of a batch invocation
(docs/platform.md P1): a message is locked from its receipt until the host completes it after
`handle` returns, so the whole batch, review waits, overload waits and publisher retries
included, must end well inside the queue's lock duration (the infra lock check sizes both).
Scoring ends `publish_s` before the budget does; what it has not finished by then fails (and is
redelivered); the send gets what is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any, Literal

from msgspec.structs import asdict

from shared.answers import QueueResult, encode
from shared.errors import DeadlineExceeded, Overloaded, PayloadTooLarge, PublishFailed, ScoringError
from shared.events import PaymentEvent, decode_event
from shared.queue.idempotency import MemoryResultStore, RedisResultStore, ResultStore
from shared.queue.messages import Incoming, Outbound, enqueued_iso, rejection_record
from shared.queue.publisher import Publisher, ServiceBusPublisher
from shared.settings import Settings
from shared.telemetry import metrics, process
from shared.telemetry.tracing import sampled

if TYPE_CHECKING:
    from shared.answers import Scored
    from shared.service import ScoringService

__all__ = ["COMPLETED_QUEUE", "REJECTED_QUEUE", "BatchBudget", "Handled", "Outcome", "PaymentBatch"]

COMPLETED_QUEUE = "risk-completed"
REJECTED_QUEUE = "risk-rejected"
Outcome = Literal["completed", "duplicate", "rejected", "failed"]
INPUT = "payments"  # the trigger's queue, as telemetry names it
OVERLOAD_WAIT_S = 5.0  # how long a message waits out a full model queue before its batch is redelivered
# NOTE: the SDK's retries stay well inside the publish share of the budget (its default backoff
# may wait up to 120 s between tries); the budget's own timeout is the hard bound.
PUBLISH_RETRY = {"retry_total": 3, "retry_backoff_factor": 0.5, "retry_backoff_max": 2.0}


@dataclass(frozen=True, slots=True)
class BatchBudget:
    """How long one invocation's batch may take, decode to publish (QUEUE_BATCH_BUDGET_MS).

    `total_s` must stay below the queue's lock duration less the host's own settle time
    (tests/infra checks it); `publish_s`, the end of it kept for the one send.
    """

    total_s: float = 60.0
    publish_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.publish_s < self.total_s:
            raise ValueError(f"BatchBudget: 0 < publish_s < total_s, got {self.publish_s}, {self.total_s}")

    @classmethod
    def of(cls, total_ms: float) -> BatchBudget:
        """A budget of `total_ms`, a sixth of it kept for publishing."""
        return cls(total_ms / 1000, total_ms / 6000)


@dataclass(frozen=True, slots=True)
class Handled:
    """The verdict on one message: its result (or rejection record) and why, where it failed."""

    message_id: str
    outcome: Outcome
    body: bytes | None = None
    error: ScoringError | None = None

    @property
    def reason(self) -> str | None:
        return f"{self.error.code}: {self.error.detail}" if self.error is not None else None


class PaymentBatch:
    """The queue path's handler over the core, a result store and a publisher."""

    def __init__(
        self,
        service: Callable[[], Awaitable[ScoringService]],
        store: ResultStore,
        publisher: Publisher,
        *,
        max_message_bytes: int,
        budget: BatchBudget | None = None,
    ) -> None:
        self._service = service
        self._store = store
        self.publisher = publisher
        self._cap = max_message_bytes
        self._budget = budget or BatchBudget()
        self._core: ScoringService | None = None  # once scoring reached it: where the queue's health is reported

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        service: Callable[[], Awaitable[ScoringService]],
        *,
        store: ResultStore | None = None,
        publisher: Publisher | None = None,
    ) -> PaymentBatch:
        """Redis keeps results when REDIS_URL is set (else this process); the SDK publishes."""
        if store is None and settings.redis_url:
            store = RedisResultStore.from_url(
                settings.redis_url,
                ttl_s=settings.result_ttl_s,
                prefix=settings.redis_prefix,
                use_entra=settings.redis_use_entra,
            )
        if publisher is None:
            publisher = ServiceBusPublisher(
                connection_string=settings.service_bus_connection,
                namespace=settings.service_bus_namespace,
                **PUBLISH_RETRY,
            )
        store = store or MemoryResultStore(settings.result_ttl_s)
        budget = BatchBudget.of(settings.queue_batch_budget_ms)
        return cls(service, store, publisher, max_message_bytes=settings.max_message_bytes, budget=budget)

    async def handle(self, messages: Sequence[Incoming]) -> list[Handled]:
        """A verdict per message, in order, within the budget; raises nothing a message caused."""
        started = time.perf_counter()
        ends = asyncio.get_running_loop().time() + self._budget.total_s
        traced = self._traced(messages)
        done: list[Handled | None] = [None] * len(messages)
        primary: dict[str, int] = {}  # event_id → the first message of the batch carrying it
        events: dict[int, PaymentEvent] = {}
        ids: dict[int, str] = {}  # message → its event_id, for every message that decoded
        parse_s: dict[int, float] = {}  # message → its decode time
        for i, msg in enumerate(messages):
            t0 = time.perf_counter()
            try:
                event = self._decode(msg)
            except ScoringError as exc:
                done[i] = Handled(msg.message_id, "rejected", rejection_record(msg, exc), exc)
                continue
            ids[i] = event.event_id
            parse_s[i] = time.perf_counter() - t0
            if primary.setdefault(event.event_id, i) == i:
                events[i] = event
        await self._results(messages, events, parse_s, done, started, traced, ends - self._budget.publish_s)
        for i, msg in enumerate(messages):  # a payment twice in one batch: the second follows the first
            if done[i] is None:
                first = done[primary[ids[i]]]
                assert first is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
                outcome: Outcome = "duplicate" if first.outcome in ("completed", "duplicate") else first.outcome
                done[i] = Handled(msg.message_id, outcome, first.body, first.error)
        verdicts = await self._publish(messages, [d for d in done if d is not None], ids, traced, ends)
        self._measure(messages, verdicts, started, traced)
        self._report(verdicts)
        return verdicts

    def _report(self, verdicts: list[Handled]) -> None:
        """Readiness lists the queue path as degraded from a batch with failures until one without."""
        if self._core is None:
            return
        failed = [v for v in verdicts if v.outcome == "failed"]
        problem = None
        if failed:
            problem = f"{len(failed)} of {len(verdicts)} messages of a batch wait for redelivery ({failed[0].reason})"
        self._core.report("queue", problem)

    @staticmethod
    def _traced(messages: Sequence[Incoming]) -> dict[int, Any]:
        """A span per sampled message, under the trace context its properties carry."""
        telemetry = process.current()
        if telemetry is None:
            return {}
        from opentelemetry.trace import SpanKind

        spans: dict[int, Any] = {}
        for i, msg in enumerate(messages):
            parent = msg.properties.get("traceparent")
            if sampled(parent, telemetry.ratio):
                spans[i] = telemetry.span(
                    f"{INPUT} process",
                    kind=SpanKind.CONSUMER,
                    traceparent=parent,
                    tracestate=msg.properties.get("tracestate"),
                    attributes={
                        "messaging.system": "servicebus",
                        "messaging.destination.name": INPUT,
                        "messaging.message.id": msg.message_id,
                        "messaging.message.delivery_count": msg.delivery_count,
                    },
                )
        return spans

    @staticmethod
    def _measure(messages: Sequence[Incoming], verdicts: list[Handled], started: float, traced: dict[int, Any]) -> None:
        """Verdicts counted, completed messages' age, the batch's duration; spans ended."""
        now = time.time()
        counts: dict[str, int] = {}
        for msg, verdict in zip(messages, verdicts, strict=True):
            counts[verdict.outcome] = counts.get(verdict.outcome, 0) + 1
            if verdict.outcome == "completed" and msg.enqueued_time is not None:
                metrics.queue_age(now - _timestamp(msg))
        for outcome, count in counts.items():
            metrics.queue_message(outcome, count)
        metrics.queue_batch(INPUT, time.perf_counter() - started)
        for i, span in traced.items():
            span.set_attribute("scoring.outcome", verdicts[i].outcome)
            span.end()

    def _decode(self, msg: Incoming) -> PaymentEvent:
        if len(msg.body) > self._cap:
            raise PayloadTooLarge(f"message of {len(msg.body)} bytes exceeds MAX_MESSAGE_BYTES ({self._cap})")
        return decode_event(msg.body)

    async def _results(
        self,
        messages: Sequence[Incoming],
        events: dict[int, PaymentEvent],
        parse_s: dict[int, float],
        done: list[Handled | None],
        started: float,
        traced: dict[int, Any],
        until: float,
    ) -> None:
        """Fill `done` for every decoded message by loop time `until`: kept result, new result, or failure."""
        order = list(events)
        try:
            kept = await _by(until, self._store.find([events[i].event_id for i in order]), "looking up results")
        except ScoringError as exc:
            self._fail(messages, order, done, exc)
            return
        fresh = [i for i, found in zip(order, kept, strict=True) if found is None]
        for i, found in zip(order, kept, strict=True):
            if found is not None:
                done[i] = Handled(messages[i].message_id, "duplicate", found)
        if not fresh:
            return
        try:
            service = self._core = await self._service()
        except ScoringError as exc:
            self._fail(messages, fresh, done, exc)
            return
        scored = await asyncio.gather(*(self._score(service, events[i], parse_s[i], until) for i in fresh))
        new: list[tuple[int, bytes]] = []
        for i, result in zip(fresh, scored, strict=True):
            if isinstance(result, ScoringError):
                outcome: Outcome = "failed" if result.retryable else "rejected"
                body = None if result.retryable else rejection_record(messages[i], result)
                done[i] = Handled(messages[i].message_id, outcome, body, result)
            else:
                new.append((i, completed_body(result, messages[i], started)))
                if i in traced:
                    _stage_spans(traced[i], result, started)
        try:
            stored = await _by(
                until, self._store.keep([(events[i].event_id, body) for i, body in new]), "keeping results"
            )
        except ScoringError as exc:
            self._fail(messages, [i for i, _ in new], done, exc)
            return
        for (i, body), kept_body in zip(new, stored, strict=True):
            outcome = "completed" if kept_body == body else "duplicate"  # NOTE: another replica won
            done[i] = Handled(messages[i].message_id, outcome, kept_body)

    @staticmethod
    async def _score(
        service: ScoringService, event: PaymentEvent, parse_s: float, until: float
    ) -> Scored | ScoringError:
        """One event through the core (as `score_many` does, with its decode time) by loop time
        `until`: errors in its slot, `DeadlineExceeded` (redelivered) when the budget runs out.

        A full model queue (`Overloaded`) is waited out here, backing off up to OVERLOAD_WAIT_S
        and never past `until`: a failed batch would be redelivered at once and, after
        maxDeliveryCount tries, dead-letter a valid payment. A review holds the answer for at most
        LLM_QUEUE_TIMEOUT_MS, and never past `until` either (then the event is answered locally).
        """
        loop = asyncio.get_running_loop()
        pause, waited = 0.005, 0.0
        try:
            async with asyncio.timeout_at(until):
                while True:
                    # NOTE: a queue message can wait longer than an HTTP caller for a review of its event
                    wait_s = min(service.settings.review.queue_timeout_ms / 1000, max(0.0, until - loop.time()))
                    try:
                        return await service.score(event, parse_s=parse_s, review_wait_s=wait_s)
                    except Overloaded as exc:
                        if waited >= OVERLOAD_WAIT_S or loop.time() + pause >= until:
                            return exc
                    except ScoringError as exc:
                        return exc
                    await asyncio.sleep(pause)
                    waited, pause = waited + pause, min(pause * 2, 0.5)
        except TimeoutError:
            return DeadlineExceeded(
                "the queue batch budget (QUEUE_BATCH_BUDGET_MS) ran out before this event was scored"
            )

    @staticmethod
    def _fail(
        messages: Sequence[Incoming], which: Sequence[int], done: list[Handled | None], exc: ScoringError
    ) -> None:
        for i in which:
            done[i] = Handled(messages[i].message_id, "failed", None, exc)

    async def _publish(
        self,
        messages: Sequence[Incoming],
        verdicts: list[Handled],
        ids: dict[int, str],
        traced: dict[int, Any],
        until: float,
    ) -> list[Handled]:
        """One send for the batch by loop time `until`; if it fails or outlasts the budget, every
        message it carried fails (and is redelivered: duplicate detection drops what did arrive)."""
        outbound: list[Outbound] = []
        carried: list[int] = []
        for i, (msg, verdict) in enumerate(zip(messages, verdicts, strict=True)):
            if verdict.body is None or verdict.outcome == "failed":
                continue
            queue = REJECTED_QUEUE if verdict.outcome == "rejected" else COMPLETED_QUEUE
            message_id = msg.message_id if verdict.outcome == "rejected" else ids[i]
            properties = _continued(msg.properties, traced.get(i))
            outbound.append(Outbound(queue, verdict.body, message_id, msg.correlation_id, properties))
            carried.append(i)
        failure: ScoringError | None = None
        try:
            async with asyncio.timeout_at(until):
                await self.publisher.publish(outbound)
        except TimeoutError:
            failure = PublishFailed("publishing outlasted the queue batch budget (QUEUE_BATCH_BUDGET_MS)")
        except ScoringError as exc:
            failure = exc
        if failure is not None:
            for i in carried:
                verdicts[i] = Handled(verdicts[i].message_id, "failed", None, failure)
        return verdicts

    async def aclose(self) -> None:
        await self.publisher.aclose()
        await self._store.aclose()


async def _by(until: float, work: Awaitable[Any], what: str) -> Any:
    """`work`, or `DeadlineExceeded` once loop time `until` passes (the batch budget's scoring share)."""
    try:
        async with asyncio.timeout_at(until):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"{what} outlasted the queue batch budget (QUEUE_BATCH_BUDGET_MS)") from None


def _timestamp(msg: Incoming) -> float:
    assert msg.enqueued_time is not None  # noqa: S101 narrows the type: callers check it first
    when = msg.enqueued_time if msg.enqueued_time.tzinfo else msg.enqueued_time.replace(tzinfo=UTC)
    return when.timestamp()


def _continued(properties: Mapping[str, str], span: Any) -> Mapping[str, str]:
    """The trace context a result carries: from this message's span when it has one, else as received."""
    if span is None:
        return properties
    from shared.telemetry.setup import traceparent_of

    traceparent = traceparent_of(span)
    return {**properties, "traceparent": traceparent, "Diagnostic-Id": traceparent}


def _stage_spans(span: Any, scored: Scored, started: float) -> None:
    telemetry = process.current()
    if telemetry is not None:
        begun = time.time_ns() - int((time.perf_counter() - started) * 1e9)
        telemetry.stage_spans(span, begun, scored.timings_ms)
        span.set_attribute("scoring.model", scored.model)
        span.set_attribute("scoring.model.version", scored.model_version)


def completed_body(scored: Scored, msg: Incoming, started: float) -> bytes:
    """risk-completed: the HTTP result plus enqueued time, processing time and delivery count."""
    processing_ms = round((time.perf_counter() - started) * 1000, 3)
    return encode(
        QueueResult(
            **asdict(scored),
            enqueued_time=enqueued_iso(msg),
            processing_ms=processing_ms,
            delivery_count=msg.delivery_count,
        )
    )
