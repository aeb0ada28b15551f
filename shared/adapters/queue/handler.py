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
inside the batch: the call is tried again with backoff and full jitter until the budget's share
for it runs out (`_held`). A held batch holds its messages' locks, so an outage spends no
delivery count while it lasts (a failed batch is redelivered at once: five deliveries in a
millisecond would dead-letter valid payments). Only then does it mark the messages it touched
`failed`; the adapter raises afterwards so the host abandons the batch and Service Bus
redelivers it (dead-lettering after the queue's max delivery count: an outage of up to
maxDeliveryCount x QUEUE_BATCH_BUDGET_MS is absorbed, docs/capacity.md). Whatever was kept or
sent before is republished byte for byte, and duplicate detection drops the republish. A fault
of ours that one message meets (an exception no adapter translated) rejects that message alone
(`unexpected`), never its neighbours.

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
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from msgspec.structs import asdict

from shared.adapters.queue.idempotency import Kept, MemoryResultStore, RedisResultStore, ResultStore
from shared.adapters.queue.messages import Incoming, Outbound, enqueued_iso, rejection_id, rejection_record, unpack
from shared.adapters.queue.publisher import Publisher, ServiceBusPublisher
from shared.domain.answers import QueueResult, encode
from shared.domain.events import PaymentEvent, decode_event, event_digest
from shared.errors import (
    DeadlineExceeded,
    EventExpired,
    EventIdConflict,
    InvalidEvent,
    ModelSourceError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    PublishFailed,
    ScoringError,
    Unavailable,
    Unexpected,
)
from shared.settings import CLOCK_SKEW_S, Settings
from shared.telemetry import metrics, process
from shared.telemetry.tracing import sampled

if TYPE_CHECKING:
    from shared.core.service import ScoringService
    from shared.domain.answers import Scored

__all__ = ["COMPLETED_QUEUE", "REJECTED_QUEUE", "BatchBudget", "Handled", "Outcome", "QueueHandler"]

COMPLETED_QUEUE = "risk-completed"
REJECTED_QUEUE = "risk-rejected"
Outcome = Literal["completed", "duplicate", "rejected", "failed"]
INPUT = "payments"  # the trigger's queue, as telemetry names it
OVERLOAD_WAIT_S = 5.0  # how long a message waits out a full model queue before its batch is redelivered
# the SDK's retries stay well inside the publish share of the budget (its default backoff
# may wait up to 120 s between tries); the budget's own timeout is the hard bound.
PUBLISH_RETRY = {"retry_total": 3, "retry_backoff_factor": 0.5, "retry_backoff_max": 2.0}
HOLD_FIRST_S = 0.05  # the first wait after a dependency outage; doubling (full jitter) up to HOLD_MAX_S
HOLD_MAX_S = 2.0
T = TypeVar("T")


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
    """The verdict on one message, or one event of an envelope (`message_id` `<id>#<index>`):
    its result (or rejection record) and why, where it failed."""

    message_id: str
    outcome: Outcome
    body: bytes | None = None
    error: ScoringError | None = None

    @property
    def reason(self) -> str | None:
        return f"{self.error.code}: {self.error.detail}" if self.error is not None else None


@dataclass(slots=True)
class Delivery:
    """One message of the batch (or one event of an envelope) on its way to its verdict.

    `event` is None once decoding rejected it (its verdict says why); `primary` is the batch's
    first delivery of the same payment, whose verdict this one follows.
    """

    msg: Incoming
    span: Any = None  # the message's span, when sampled
    event: PaymentEvent | None = None
    digest: bytes = b""  # the payment's content digest, once decoded
    parse_s: float = 0.0
    primary: Delivery | None = None
    verdict: Handled | None = None

    @property
    def decoded(self) -> PaymentEvent:
        assert self.event is not None  # noqa: S101 narrows the type: only decoded deliveries get past decoding
        return self.event


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
        _trace(batch)
        primaries = self._decode_all(batch)
        await self._settle(primaries, started, ends - self._budget.publish_s)
        _follow_primaries(batch)
        await self._publish(batch, ends)
        verdicts = [d.verdict for d in batch if d.verdict is not None]
        _measure(batch, verdicts, started)
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
                self._reject(d, _conflict())
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
            service = self._core = await _held(until, self._service, "starting the service")
        except ScoringError as exc:
            _fail(fresh, exc)
            return
        scored, bodies = await self._score_all(service, fresh, started, until)
        await self._keep(scored, bodies, until)

    async def _look_up(self, primaries: list[Delivery], until: float) -> list[Delivery]:
        """Kept results become duplicates (republished byte for byte); the rest, to score."""
        try:
            ids = [d.decoded.event_id for d in primaries]
            kept = await _held(until, lambda: self._store.find(ids), "looking up results")
        except ScoringError as exc:
            _fail(primaries, exc)
            return []
        fresh: list[Delivery] = []
        for d, found in zip(primaries, kept, strict=True):
            if found is None:
                fresh.append(d)
            elif found.answers(d.digest):
                d.verdict = Handled(d.msg.message_id, "duplicate", found.body)
            else:
                self._reject(d, _conflict())
        return fresh

    async def _score_all(
        self, service: ScoringService, fresh: list[Delivery], started: float, until: float
    ) -> tuple[list[Delivery], list[bytes]]:
        """Every fresh delivery scored concurrently; refusals get their verdict, the scored their body."""
        results = await asyncio.gather(*(self._score(service, d.decoded, d.parse_s, until) for d in fresh))
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
                    _stage_spans(d.span, result, started)
        return scored, bodies

    async def _keep(self, scored: list[Delivery], bodies: list[bytes], until: float) -> None:
        """SET NX per result: the first result of a payment wins (one kept by another replica first: a duplicate)."""
        items = [(d.decoded.event_id, Kept(d.digest, body)) for d, body in zip(scored, bodies, strict=True)]
        try:
            stored = await _held(until, lambda: self._store.keep(items), "keeping results")
        except ScoringError as exc:
            _fail(scored, exc)
            return
        for d, body, kept in zip(scored, bodies, stored, strict=True):
            if not kept.answers(d.digest):  # another replica kept another payment under this id first
                self._reject(d, _conflict())
                continue
            outcome: Outcome = "completed" if kept.body == body else "duplicate"  # another replica won
            d.verdict = Handled(d.msg.message_id, outcome, kept.body)

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
                    # a queue message can wait longer than an HTTP caller for a review of its event
                    wait_s = min(service.settings.review.queue_timeout_ms / 1000, max(0.0, until - loop.time()))
                    try:
                        return await service.score(event, parse_s=parse_s, review_wait_s=wait_s, via="queue")
                    except Overloaded as exc:
                        if waited >= OVERLOAD_WAIT_S or loop.time() + pause >= until:
                            return exc
                    except ScoringError as exc:
                        return exc
                    except Exception as exc:  # a fault of ours: this message alone is rejected
                        return Unexpected(f"{type(exc).__name__} while scoring this message (see the log)")
                    await asyncio.sleep(pause)
                    waited, pause = waited + pause, min(pause * 2, 0.5)
        except TimeoutError:
            return DeadlineExceeded(
                "the queue batch budget (QUEUE_BATCH_BUDGET_MS) ran out before this event was scored"
            )

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
            properties = _continued(msg.properties, d.span)
            outbound.append(Outbound(queue, verdict.body, message_id, msg.correlation_id, properties))
            carried.append(d)
        failure: ScoringError | None = None
        try:
            await _held(until, lambda: self.publisher.publish(outbound), "publishing")
        except DeadlineExceeded:
            failure = PublishFailed("publishing outlasted the queue batch budget (QUEUE_BATCH_BUDGET_MS)")
        except ScoringError as exc:
            failure = exc
        if failure is not None:
            _fail(carried, failure)

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


def _trace(batch: list[Delivery]) -> None:
    """A span per sampled message, under the trace context its properties carry."""
    telemetry = process.current()
    if telemetry is None:
        return
    from opentelemetry.trace import SpanKind

    for d in batch:
        msg = d.msg
        parent = msg.properties.get("traceparent")
        if sampled(parent, telemetry.ratio):
            d.span = telemetry.span(
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


def _follow_primaries(batch: list[Delivery]) -> None:
    """A payment twice in one batch: the second gets the first's verdict (a result as a duplicate)."""
    for d in batch:
        if d.primary is not None:
            first = d.primary.verdict
            assert first is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
            outcome: Outcome = "duplicate" if first.outcome in ("completed", "duplicate") else first.outcome
            d.verdict = Handled(d.msg.message_id, outcome, first.body, first.error)


def _conflict() -> EventIdConflict:
    return EventIdConflict(
        "this event_id already names a different payment; its first payment's result stands, and this one "
        "is neither scored nor given it (send a new event_id for a new payment)"
    )


def _fail(which: list[Delivery], exc: ScoringError) -> None:
    for d in which:
        d.verdict = Handled(d.msg.message_id, "failed", None, exc)


def _measure(batch: list[Delivery], verdicts: list[Handled], started: float) -> None:
    """Verdicts counted, completed messages' age, the batch's duration; spans ended."""
    now = time.time()
    counts: dict[str, int] = {}
    for d, verdict in zip(batch, verdicts, strict=True):
        counts[verdict.outcome] = counts.get(verdict.outcome, 0) + 1
        if verdict.outcome == "completed" and d.msg.enqueued_time is not None:
            metrics.queue_age(now - _timestamp(d.msg))
    for outcome, count in counts.items():
        metrics.queue_message(outcome, count)
    metrics.queue_batch(INPUT, time.perf_counter() - started)
    for d, verdict in zip(batch, verdicts, strict=True):
        if d.span is not None:
            d.span.set_attribute("scoring.outcome", verdict.outcome)
            d.span.end()


def _outage(exc: BaseException) -> bool:
    """A dependency down or not ready (the result store, the publisher, the model store): worth waiting out."""
    return isinstance(exc, (Unavailable, NotReady, ModelSourceError)) and not isinstance(exc, Overloaded)


async def _held(until: float, call: Callable[[], Awaitable[T]], what: str) -> T:
    """`call()`, tried again after a dependency outage with backoff and full jitter while loop time
    `until` allows another wait; the last failure (or `DeadlineExceeded`) once it does not."""
    from tenacity import AsyncRetrying, retry_if_exception, stop_before_delay, wait_random_exponential

    retrying = AsyncRetrying(
        retry=retry_if_exception(_outage),
        wait=wait_random_exponential(multiplier=HOLD_FIRST_S, max=HOLD_MAX_S),
        stop=stop_before_delay(max(0.0, until - asyncio.get_running_loop().time())),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            result: T = await _by(until, call(), what)
            return result
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


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
