"""One invocation's batch of payments: each gets exactly one verdict, and each result is sent once.

    unpack      an envelope message (`{"events": [...]}`) into one delivery per event, ids
                `<message id>#<index>`; an envelope over MAX_MESSAGE_BYTES or MAX_BATCH_ITEMS,
                unreadable, or holding a non-object → the whole message rejected
    decode      over MAX_MESSAGE_BYTES, bad JSON, schema violation, a timestamp outside the
                idempotency window (EVENT_MAX_AGE_S) → rejected at once (its own fault)
    look up     results kept by event_id, with their payment's digest → the same payment is a
                duplicate (the kept bytes republished); other content under that id, a conflict
    score       the rest concurrently, each through the core's `score` (they share model batches)
    keep        SET NX per result: the first result of a payment wins, everywhere
    publish     one send: results to risk-completed (message_id = event_id), rejections to risk-rejected
                (message_id from what was rejected: `rejection_id`, never the producer's id alone)

A dependency outage (the result store down, no model ready, publishing failing) is waited out
inside the batch (shared/adapters/queue/retry.py), within the batch's `BatchBudget`
(shared/adapters/queue/budget.py). Only then does it mark the messages it touched `failed`; the
adapter raises afterwards so the host abandons the batch and Service Bus redelivers it. Whatever
was kept or sent before is republished byte for byte, and duplicate detection drops the
republish. A fault of ours that one message meets (an exception no adapter translated) rejects
that message alone (`unexpected`), never its neighbours. Telemetry: shared/adapters/queue/tracing.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from msgspec.structs import asdict

from shared.adapters.queue.budget import BatchBudget
from shared.adapters.queue.idempotency import Kept, MemoryResultStore, RedisResultStore, ResultStore
from shared.adapters.queue.messages import (
    REJECTED_QUEUE,
    Incoming,
    Outbound,
    enqueued_iso,
    rejection_id,
    rejection_record,
    unpack,
)
from shared.adapters.queue.publisher import Publisher, ServiceBusPublisher
from shared.adapters.queue.retry import PUBLISH_RETRY, held, score_within
from shared.adapters.queue.tracing import continued, measure, spans, stage_spans
from shared.adapters.queue.verdicts import Delivery, Handled, Outcome, conflict, fail, follow_primaries
from shared.domain.answers import QueueResult, encode
from shared.domain.events import PaymentEvent, decode_event, event_digest
from shared.errors import (
    DeadlineExceeded,
    EventExpired,
    InvalidEvent,
    PayloadTooLarge,
    PublishFailed,
    ScoringError,
)
from shared.settings import CLOCK_SKEW_S, Settings

if TYPE_CHECKING:
    from shared.core.service import ScoringService
    from shared.domain.answers import Scored

__all__ = ["COMPLETED_QUEUE", "QueueHandler"]

COMPLETED_QUEUE = "risk-completed"


class QueueHandler:
    """The queue path's handler over the core, a result store and a publisher."""

    def __init__(
        self,
        service: Callable[[], Awaitable[ScoringService]],
        store: ResultStore,
        publisher: Publisher,
        *,
        max_message_bytes: int,
        max_envelope_events: int = Settings.max_batch_items,
        budget: BatchBudget | None = None,
        max_age_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        id_key: bytes = b"",
    ) -> None:
        self._service = service
        self._store = store
        self.publisher = publisher
        self._cap = max_message_bytes
        self._max_events = max_envelope_events  # MAX_BATCH_ITEMS, as for `/api/score/batch`
        self._budget = budget or BatchBudget()
        self._max_age_s = max_age_s  # the idempotency window (EVENT_MAX_AGE_S); 0: none
        self._clock = clock
        self._id_key = id_key  # hashes a rejected body's user id (PREDICTION_LOG_HASH_KEY)
        self._core: ScoringService | None = None  # once scoring reached it: where the queue's health is reported

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        service: Callable[[], Awaitable[ScoringService]],
        *,
        store: ResultStore | None = None,
        publisher: Publisher | None = None,
    ) -> QueueHandler:
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
        return cls(
            service,
            store,
            publisher,
            max_message_bytes=settings.max_message_bytes,
            max_envelope_events=settings.max_batch_items,
            budget=budget,
            max_age_s=settings.event_max_age_s,
            id_key=(settings.prediction_log.hash_key or "").encode(),
        )

    async def handle(self, messages: Sequence[Incoming]) -> list[Handled]:
        """A verdict per message, or per event of an envelope message, in order, within the
        budget; raises nothing a message caused."""
        started = time.perf_counter()
        ends = asyncio.get_running_loop().time() + self._budget.total_s
        batch = self._unpack_all(messages)
        for d, span in zip(batch, spans([d.msg for d in batch]), strict=True):
            d.span = span
        primaries = self._decode_all(batch)
        await self._settle(primaries, started, ends - self._budget.publish_s)
        follow_primaries(batch)
        await self._publish(batch, ends)
        verdicts = [d.verdict for d in batch if d.verdict is not None]
        measure([(d.msg, d.span, v.outcome) for d, v in zip(batch, verdicts, strict=True)], started)
        self._report(verdicts)
        return verdicts

    def _unpack_all(self, messages: Sequence[Incoming]) -> list[Delivery]:
        """A delivery per event: an envelope's events each, any other message as itself; an
        envelope refused whole is one delivery, rejected already."""
        batch: list[Delivery] = []
        for msg in messages:
            try:
                batch.extend(Delivery(event) for event in unpack(msg, self._cap, self._max_events))
            except ScoringError as exc:
                refused = Delivery(msg)
                self._reject(refused, exc)
                batch.append(refused)
        return batch

    def _decode_all(self, batch: list[Delivery]) -> list[Delivery]:
        """Each delivery decoded or rejected (its own fault); the first delivery of each payment.
        A second delivery of the same id with other content is a conflict, not a follower."""
        first: dict[str, Delivery] = {}  # event_id → the batch's first delivery carrying it
        for d in batch:
            if d.verdict is not None:  # an envelope refused whole
                continue
            t0 = time.perf_counter()
            try:
                event = self._decode(d.msg)
            except ScoringError as exc:
                self._reject(d, exc)
                continue
            d.event, d.digest, d.parse_s = event, event_digest(event), time.perf_counter() - t0
            primary = first.setdefault(event.event_id, d)
            if primary is d:
                continue
            if primary.digest == d.digest:
                d.primary = primary
            else:
                self._reject(d, conflict())
        return list(first.values())

    def _decode(self, msg: Incoming) -> PaymentEvent:
        if len(msg.body) > self._cap:
            raise PayloadTooLarge(f"message of {len(msg.body)} bytes exceeds MAX_MESSAGE_BYTES ({self._cap})")
        event = decode_event(msg.body)
        if self._max_age_s:
            self._check_window(event)
        return event

    def _check_window(self, event: PaymentEvent) -> None:
        """An event is scored only inside the idempotency window: a result outlives its window
        (RESULT_TTL_S > EVENT_MAX_AGE_S + CLOCK_SKEW_S), so an older one may have been answered
        already, its result gone: it is refused, never scored a second time."""
        age = self._clock() - event.timestamp.timestamp()
        if age > self._max_age_s:
            raise EventExpired(
                f"the event is {age:.0f} s old, past the idempotency window of {self._max_age_s:.0f} s "
                "(EVENT_MAX_AGE_S): it may have been answered already; not scored again"
            )
        if -age > CLOCK_SKEW_S:
            raise InvalidEvent(f"timestamp is {-age:.0f} s ahead of this replica's clock (at most {CLOCK_SKEW_S:.0f})")

    def _reject(self, d: Delivery, exc: ScoringError) -> None:
        """The message's own fault: a rejection record (redacted), published to risk-rejected."""
        d.verdict = Handled(d.msg.message_id, "rejected", rejection_record(d.msg, exc, self._id_key), exc)

    async def _settle(self, primaries: list[Delivery], started: float, until: float) -> None:
        """A verdict on every primary by loop time `until`: kept result, new result, or failure."""
        fresh = await self._look_up(primaries, until)
        if not fresh:
            return
        try:
            service = self._core = await held(until, self._service, "starting the service")
        except ScoringError as exc:
            fail(fresh, exc)
            return
        scored, bodies = await self._score_all(service, fresh, started, until)
        await self._keep(scored, bodies, until)

    async def _look_up(self, primaries: list[Delivery], until: float) -> list[Delivery]:
        """Kept results become duplicates (republished byte for byte); the rest, to score."""
        try:
            ids = [d.decoded.event_id for d in primaries]
            kept = await held(until, lambda: self._store.find(ids), "looking up results")
        except ScoringError as exc:
            fail(primaries, exc)
            return []
        fresh: list[Delivery] = []
        for d, found in zip(primaries, kept, strict=True):
            if found is None:
                fresh.append(d)
            elif found.answers(d.digest):
                d.verdict = Handled(d.msg.message_id, "duplicate", found.body)
            else:
                self._reject(d, conflict())
        return fresh

    async def _score_all(
        self, service: ScoringService, fresh: list[Delivery], started: float, until: float
    ) -> tuple[list[Delivery], list[bytes]]:
        """Every fresh delivery scored concurrently; refusals get their verdict, the scored their body."""
        results = await asyncio.gather(*(score_within(service, d.decoded, d.parse_s, until) for d in fresh))
        scored: list[Delivery] = []
        bodies: list[bytes] = []
        for d, result in zip(fresh, results, strict=True):
            if isinstance(result, ScoringError):
                outcome: Outcome = "failed" if result.retryable else "rejected"
                body = None if result.retryable else rejection_record(d.msg, result, self._id_key)
                d.verdict = Handled(d.msg.message_id, outcome, body, result)
            else:
                scored.append(d)
                bodies.append(completed_body(result, d.msg, started))
                if d.span is not None:
                    stage_spans(d.span, result, started)
        return scored, bodies

    async def _keep(self, scored: list[Delivery], bodies: list[bytes], until: float) -> None:
        """SET NX per result: the first result of a payment wins (one kept by another replica first: a duplicate)."""
        items = [(d.decoded.event_id, Kept(d.digest, body)) for d, body in zip(scored, bodies, strict=True)]
        try:
            stored = await held(until, lambda: self._store.keep(items), "keeping results")
        except ScoringError as exc:
            fail(scored, exc)
            return
        for d, body, kept in zip(scored, bodies, stored, strict=True):
            if not kept.answers(d.digest):  # another replica kept another payment under this id first
                self._reject(d, conflict())
                continue
            outcome: Outcome = "completed" if kept.body == body else "duplicate"  # another replica won
            d.verdict = Handled(d.msg.message_id, outcome, kept.body)

    async def _publish(self, batch: list[Delivery], until: float) -> None:
        """One send for the batch by loop time `until`; if it fails or outlasts the budget, every
        message it carried fails (and is redelivered: duplicate detection drops what did arrive)."""
        outbound: list[Outbound] = []
        carried: list[Delivery] = []
        for d in batch:
            verdict, msg = d.verdict, d.msg
            if verdict is None or verdict.body is None or verdict.outcome == "failed":
                continue
            rejected = verdict.outcome == "rejected"
            queue = REJECTED_QUEUE if rejected else COMPLETED_QUEUE
            message_id = rejection_id(msg) if rejected else d.decoded.event_id
            properties = continued(msg.properties, d.span)
            outbound.append(Outbound(queue, verdict.body, message_id, msg.correlation_id, properties))
            carried.append(d)
        failure: ScoringError | None = None
        try:
            await held(until, lambda: self.publisher.publish(outbound), "publishing")
        except DeadlineExceeded:
            failure = PublishFailed("publishing outlasted the queue batch budget (QUEUE_BATCH_BUDGET_MS)")
        except ScoringError as exc:
            failure = exc
        if failure is not None:
            fail(carried, failure)

    def _report(self, verdicts: list[Handled]) -> None:
        """Readiness lists the queue path as degraded from a batch with failures until one without."""
        if self._core is None:
            return
        failed = [v for v in verdicts if v.outcome == "failed"]
        problem = None
        if failed:
            problem = f"{len(failed)} of {len(verdicts)} messages of a batch wait for redelivery ({failed[0].reason})"
        self._core.report("queue", problem)

    async def aclose(self) -> None:
        await self.publisher.aclose()
        await self._store.aclose()


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
