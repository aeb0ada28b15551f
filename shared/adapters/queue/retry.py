"""What a queue batch waits out, and for how long: never past its budget (shared/adapters/queue/budget.py).

    held(until, call, what)         a dependency outage (the result store, the publisher, no model
                                    ready): `call()` tried again with backoff and full jitter
    score_within(service, event..)  one event through the core; a full model queue (`Overloaded`)
                                    waited out up to OVERLOAD_WAIT_S
    PUBLISH_RETRY                   the Service Bus SDK's own retries, well inside the publish share

Why wait inside the batch: a held batch holds its messages' locks, so an outage spends no
delivery count while it lasts, whereas a failed batch is redelivered at once, and five
deliveries in a millisecond would dead-letter valid payments. Only once the budget's share runs
out does the batch fail its messages for redelivery (an outage of up to maxDeliveryCount x
QUEUE_BATCH_BUDGET_MS is absorbed, docs/capacity.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from shared.adapters.queue.budget import by
from shared.errors import (
    DeadlineExceeded,
    ModelSourceError,
    NotReady,
    Overloaded,
    ScoringError,
    Unavailable,
    Unexpected,
)

if TYPE_CHECKING:
    from shared.core.service import ScoringService
    from shared.domain.answers import Scored
    from shared.domain.events import PaymentEvent

__all__ = ["HOLD_FIRST_S", "HOLD_MAX_S", "OVERLOAD_WAIT_S", "PUBLISH_RETRY", "held", "outage", "score_within"]

OVERLOAD_WAIT_S = 5.0  # how long a message waits out a full model queue before its batch is redelivered
# the SDK's retries stay well inside the publish share of the budget (its default backoff
# may wait up to 120 s between tries); the budget's own timeout is the hard bound.
PUBLISH_RETRY = {"retry_total": 3, "retry_backoff_factor": 0.5, "retry_backoff_max": 2.0}
HOLD_FIRST_S = 0.05  # the first wait after a dependency outage; doubling (full jitter) up to HOLD_MAX_S
HOLD_MAX_S = 2.0
T = TypeVar("T")


def outage(exc: BaseException) -> bool:
    """A dependency down or not ready (the result store, the publisher, the model store): worth waiting out."""
    return isinstance(exc, (Unavailable, NotReady, ModelSourceError)) and not isinstance(exc, Overloaded)


async def held(until: float, call: Callable[[], Awaitable[T]], what: str) -> T:
    """`call()`, tried again after a dependency outage with backoff and full jitter while loop time
    `until` allows another wait; the last failure once it does not, or `DeadlineExceeded` when the
    budget cuts a try (naming the failure of the try before it: why it was still being tried)."""
    from tenacity import AsyncRetrying, retry_if_exception, stop_before_delay, wait_random_exponential

    retrying = AsyncRetrying(
        retry=retry_if_exception(outage),
        wait=wait_random_exponential(multiplier=HOLD_FIRST_S, max=HOLD_MAX_S),
        stop=stop_before_delay(max(0.0, until - asyncio.get_running_loop().time())),
        reraise=True,
    )
    last: ScoringError | None = None  # the last failure an attempt ended with, to name when the budget cuts one
    async for attempt in retrying:
        with attempt:
            try:
                result: T = await by(until, call(), what)
            except DeadlineExceeded as cut:
                if last is None:
                    raise
                raise DeadlineExceeded(f"{cut.detail}; the last try before: {last.detail}") from None
            except ScoringError as exc:
                last = exc
                raise
            return result
    raise AssertionError("unreachable: tenacity returns or re-raises")  # pragma: no cover


async def score_within(
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
                wait_s = min(service.limits.review_queue_wait_s, max(0.0, until - loop.time()))
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
        return DeadlineExceeded("the queue batch budget (QUEUE_BATCH_BUDGET_MS) ran out before this event was scored")
