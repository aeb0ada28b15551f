"""The second opinion on the uncertain tail: a `Decider` that asks Azure OpenAI, bounded.

    decide ─ local verdict (always computed first: it is the fallback and the floor)
       │ in the band [LLM_BAND_LOW, LLM_BAND_HIGH], or a free-text note?  no → local verdict
       ▼
    review task ─ bounds (rate bucket, share budget: a cached answer spends them as a call does)
       │            └ answer cache (by the question's fields AND the event's content digest:
       │              L1, Redis, single-flight) └ miss → breaker → Azure OpenAI
       ▼
    wait at most `wait_s` (HTTP: LLM_TIMEOUT_MS; queue: LLM_QUEUE_TIMEOUT_MS)
       ├ answered   → the stricter of the local and the reviewer's decision (`bounded`)
       ├ failed     → local verdict, review failed/skipped with the reason
       └ too slow   → local verdict, review pending; the task finishes in the background
                      and its record is readable at /api/reviews/{event_id}

The party the service screens writes the note (and every other field the reviewer reads), so
the reviewer's verdict is a signal that can only make the decision stricter: approve → review →
decline. Lowering is refused here, in code, whatever the prompt says; a team may allow one
downgrade (LLM_REVIEW_MAY_LOWER: inside the band, decline → review only), counted as `lowered`.
The answer cache is keyed by the event's content digest too, so one crafted question's answer
is never handed to another event (docs/reliability.md, "The review tail's threat model").

This object alone owns the review tasks, the bounds and their counters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from shared.domain.answers import Review, ReviewCounts, ReviewRecord, ReviewStats, ReviewStatus
from shared.domain.decision import Decider, Verdict
from shared.domain.events import PaymentEvent, event_digest
from shared.domain.spec import Decision, Thresholds
from shared.errors import ReviewFailed, ReviewSkipped, ReviewTimeout
from shared.policies import ReviewPolicy
from shared.review.client import Answer, ReviewClient
from shared.review.guard import Breaker, ShareBudget, TokenBucket
from shared.review.prompt import Opinion, Prompt
from shared.review.store import ReviewStore
from shared.stores.cache.tiered import TieredCache
from shared.telemetry import metrics

__all__ = ["ReviewStats", "Reviewer"]

log = logging.getLogger(__name__)

Settled = Callable[[str, Review, Verdict | None], None]
SHUTDOWN_GRACE_S = 1.0
SEVERITY: dict[Decision, int] = {"approve": 0, "review": 1, "decline": 2}
Direction = Literal["escalated", "confirmed", "lowered", "refused"]  # refused: a lower verdict not applied


def bounded(local: Decision, reviewed: Decision, *, may_lower: bool, in_band: bool) -> tuple[Decision, Direction]:
    """The decision a review leaves, and what it did: never lower than `local`, but for the one
    permitted downgrade (`may_lower`, inside the band, decline → review and no lower)."""
    if SEVERITY[reviewed] > SEVERITY[local]:
        return reviewed, "escalated"
    if reviewed == local:
        return local, "confirmed"
    if may_lower and in_band and local == "decline":  # to review at most, whatever the reviewer said
        return "review", "lowered"
    return local, "refused"


class Reviewer:
    """Wraps the local decider; asks for a review of the events it cannot settle."""

    def __init__(
        self,
        inner: Decider,
        policy: ReviewPolicy,
        client: ReviewClient,
        answers: TieredCache[Opinion],
        store: ReviewStore,
        prompt: Prompt,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._policy = policy
        self._client = client
        self._answers = answers
        self._store = store
        self._prompt = prompt
        self._clock = clock
        self._low, self._high = policy.band_low, policy.band_high
        self._may_lower = policy.may_lower
        self._wait_s = policy.timeout_ms / 1000
        self._model = policy.deployment  # the gen_ai.request.model of its metrics
        self._bucket = TokenBucket(policy.max_rps, policy.max_rps, clock())
        self._share = ShareBudget(policy.max_share)
        self.breaker = Breaker(policy.breaker_failures, policy.breaker_reset_s)
        self._tasks: set[asyncio.Task[Opinion]] = set()
        self._pending: set[str] = set()  # events answered "pending": their final record is owed
        self.stats = ReviewStats()
        self.settled: Settled | None = None  # `on("settled", hook)`

    def on(self, kind: Literal["settled"], hook: Settled) -> None:
        """Call `hook` when a review whose caller was told "pending" ends: (event id, its review, the
        verdict it gave when done, else None: the local decision stands). The decision recorder
        appends it to the prediction log as that decision's outcome. One hook (the recorder's)."""
        self.settled = hook

    async def decide(
        self, event: PaymentEvent, score: float, thresholds: Thresholds, wait_s: float | None = None
    ) -> Verdict:
        local = await self._inner.decide(event, score, thresholds)
        self._share.earn()
        if not (self._low <= score <= self._high or (event.note and self._policy.review_notes)):
            return local
        self.stats.asked += 1
        started = time.perf_counter()
        verdict = await self._await_review(event, score, local, self._wait_s if wait_s is None else wait_s)
        assert verdict.review is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        return verdict._replace(waited_s=time.perf_counter() - started)

    async def _await_review(self, event: PaymentEvent, score: float, local: Verdict, wait_s: float) -> Verdict:
        task = asyncio.get_running_loop().create_task(self._review(event, score, local))
        self._tasks.add(task)
        task.add_done_callback(self._settled)
        try:
            await asyncio.wait_for(asyncio.shield(task), wait_s)
        except TimeoutError:
            if not task.done():  # else it ended while the wait was called off: use its outcome
                self.stats.pending += 1
                self._pending.add(event.event_id)
                review = Review("pending", event.event_id)
                self._store.put(event.event_id, self._record(event, local, review))
                return local._replace(review=review)
        except ReviewFailed:
            pass
        return self._outcome(event, local, task)

    def _settled(self, task: asyncio.Task[Opinion]) -> None:
        """A review ended. Its failure is already kept (`_ended`) and counted; taking it here
        stops asyncio logging "Task exception was never retrieved" for each review nobody waited for."""
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    def _outcome(self, event: PaymentEvent, local: Verdict, task: asyncio.Task[Opinion]) -> Verdict:
        try:
            opinion = task.result()
        except ReviewFailed as exc:
            status: ReviewStatus = "skipped" if isinstance(exc, ReviewSkipped) else "failed"
            return local._replace(review=Review(status, event.event_id, exc.detail))
        return self._bounded(event, local, opinion, local.scores["model"])[0]

    def _bounded(
        self, event: PaymentEvent, local: Verdict, opinion: Opinion, score: float
    ) -> tuple[Verdict, Direction]:
        """The review's verdict, never below the local decision, and what the review did to it."""
        in_band = self._low <= score <= self._high
        decision, direction = bounded(local.decision, opinion.decision, may_lower=self._may_lower, in_band=in_band)
        # NOTE: the same words whether the reviewer agreed or asked for less: an answer tells the
        # caller nothing of what its note did to the reviewer
        why = {"escalated": "raised by review", "lowered": "lowered to review (LLM_REVIEW_MAY_LOWER)"}
        reason = f"{why.get(direction, local.reason)}; reviewed ({self._prompt.version})"
        review = Review("done", event.event_id, risk_score=round(opinion.risk_score, 6), rationale=opinion.rationale)
        return Verdict(decision, reason, {**local.scores, "llm": opinion.risk_score}, review), direction

    async def _review(self, event: PaymentEvent, score: float, local: Verdict) -> Opinion:
        """The whole review; its outcome is kept by event id, whoever still waits for it."""
        fields = self._prompt.fields(event, score, local.decision)
        try:
            self._spend()  # NOTE: before the cache: a cached answer costs the budgets what a call does
            key = self._prompt.key(fields, event_digest(event))
            opinion, tier = await self._answers.get_or_compute(key, lambda: self._ask(fields))
        except ReviewFailed as exc:
            self._ended(event, local, exc)
            raise
        except Exception as exc:  # NOTE: last resort: the local decision stands, never a 500
            failure = ReviewFailed(f"no review: {type(exc).__name__}")
            self._ended(event, local, failure)
            raise failure from exc
        told = event.event_id in self._pending
        self._pending.discard(event.event_id)
        self.stats.done += 1
        if tier is not None:
            self.stats.cached += 1
        verdict, direction = self._bounded(event, local, opinion, score)
        metrics.llm_review(direction, self._prompt.version)
        self._store.put(event.event_id, self._record(event, verdict, None, direction))
        if told and self.settled is not None and verdict.review is not None:
            self.settled(event.event_id, verdict.review, verdict)
        return opinion

    def _ended(self, event: PaymentEvent, local: Verdict, exc: ReviewFailed) -> None:
        """A review ended without an answer: kept as failed (or skipped, if a caller was told pending)."""
        told = event.event_id in self._pending
        self._pending.discard(event.event_id)
        if isinstance(exc, ReviewSkipped):
            self.stats.skipped += 1
            if not told:
                return  # nobody was told to come back for it: nothing to keep
            review = Review("skipped", event.event_id, exc.detail)
        else:
            self.stats.failed += 1
            review = Review("failed", event.event_id, exc.detail)
        self._store.put(event.event_id, self._record(event, local, review))
        if told and self.settled is not None:
            self.settled(event.event_id, review, None)

    async def _ask(self, fields: dict[str, object]) -> Opinion:
        """One call to Azure OpenAI, if the breaker allows it now."""
        try:
            now = self._clock()
            if not self.breaker.allow(now):
                metrics.llm_call(self._model, 0.0, outcome="skipped")
                raise ReviewSkipped(f"breaker open for {self.breaker.open_for(now):.1f} s")
        finally:
            metrics.llm_breaker(self.breaker.state)
        self.stats.called += 1
        started = time.perf_counter()
        try:
            answer: Answer = await asyncio.wait_for(self._client.ask(fields), self._policy.call_timeout_ms / 1000)
        except TimeoutError:
            self._failed(started, "timeout")
            raise ReviewTimeout(f"no answer within {self._policy.call_timeout_ms:.0f} ms") from None
        except ReviewFailed as exc:
            self._failed(started, "timeout" if isinstance(exc, ReviewTimeout) else exc.code, exc)
            raise
        except Exception as exc:  # a fault of ours or of a library: a failure like any other
            self._failed(started, type(exc).__name__)
            raise ReviewFailed(f"no review: {type(exc).__name__}") from exc
        except BaseException:  # cancelled (shutdown): no verdict on the endpoint
            self.breaker.released()
            raise
        self.breaker.succeeded()
        metrics.llm_breaker(self.breaker.state)
        self.stats.prompt_tokens += answer.prompt_tokens
        self.stats.completion_tokens += answer.completion_tokens
        metrics.llm_call(
            self._model,
            time.perf_counter() - started,
            input_tokens=answer.prompt_tokens,
            output_tokens=answer.completion_tokens,
        )
        return answer.opinion

    def _spend(self) -> None:
        """Whether the budgets let one more review happen now (a cached answer counts as one):
        the rate, then the share; the breaker is asked only before a call."""
        if not self._bucket.take(self._clock()):
            metrics.llm_call(self._model, 0.0, outcome="skipped")
            raise ReviewSkipped(f"rate limit of {self._policy.max_rps:g} reviews/s")
        if not self._share.spend():
            metrics.llm_call(self._model, 0.0, outcome="skipped")
            raise ReviewSkipped(f"share limit of {self._policy.max_share:.0%} of events")

    def _failed(self, started: float, error: str, exc: ReviewFailed | None = None) -> None:
        self.breaker.failed(self._clock(), getattr(exc, "retry_after_s", None))
        metrics.llm_breaker(self.breaker.state)
        outcome = "timeout" if error == "timeout" else "error"
        metrics.llm_call(self._model, time.perf_counter() - started, outcome=outcome, error=error)

    def _record(
        self, event: PaymentEvent, verdict: Verdict, review: Review | None, direction: str = ""
    ) -> ReviewRecord:
        review = review or verdict.review
        assert review is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        return ReviewRecord(
            event.event_id,
            review.status,
            review.id,
            review.reason,
            review.risk_score,
            review.rationale,
            verdict.decision,
            {k: round(v, 6) for k, v in verdict.scores.items()},
            self._prompt.version,
            direction,
        )

    async def record(self, event_id: str) -> ReviewRecord | None:
        """The kept review of an event, or None."""
        return await self._store.get(event_id)

    def problem(self) -> str | None:
        """Why reviews are not happening now (readiness lists it), or None."""
        now = self._clock()
        if self.breaker.state == "open":
            return f"reviews: breaker open for {self.breaker.open_for(now):.0f} s more; local decisions only"
        return self._store.problem()

    def counts(self) -> ReviewCounts:
        """The counters, and the breaker's state (`/api/stats`)."""
        counted = msgspec.structs.asdict(self.stats)
        return ReviewCounts(**counted, breaker=self.breaker.state, breaker_opened=self.breaker.opened)

    async def aclose(self) -> None:
        """Let running reviews finish briefly, then cancel them (their pending records say so);
        close the client once none is left."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=SHUTDOWN_GRACE_S)
        cancelled = list(self._tasks)
        for task in cancelled:
            task.cancel()
        await asyncio.gather(*cancelled, return_exceptions=True)
        for event_id in self._pending:
            self._store.put(event_id, ReviewRecord(event_id, "failed", event_id, "shutdown"))
            if self.settled is not None:  # the local decision stands, and the log says why
                self.settled(event_id, Review("failed", event_id, "shutdown"), None)
        self._pending.clear()
        await self._store.drain()
        await self._client.aclose()
