"""The second opinion on the uncertain tail: a `Decider` that asks Azure OpenAI, bounded.

    decide ─ local verdict (always computed first: it is the fallback)
       │ in the band [LLM_BAND_LOW, LLM_BAND_HIGH], or a free-text note?  no → local verdict
       ▼
    review task ─ answer cache (by the question's canonical fields: L1, Redis, single-flight)
       │            └ miss → bounds (breaker, rate bucket, share budget) → Azure OpenAI
       ▼
    wait at most `wait_s` (HTTP: LLM_TIMEOUT_MS; queue: LLM_QUEUE_TIMEOUT_MS)
       ├ answered   → the reviewer's decision, both scores, the rationale
       ├ failed     → local verdict, review failed/skipped with the reason
       └ too slow   → local verdict, review pending; the task finishes in the background
                      and its record is readable at /api/reviews/{event_id}

This object alone owns the review tasks, the bounds and their counters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgspec

from shared.domain.answers import Review, ReviewCounts, ReviewRecord, ReviewStats, ReviewStatus
from shared.domain.decision import Decider, Verdict
from shared.domain.events import PaymentEvent
from shared.domain.spec import Thresholds
from shared.errors import ReviewFailed, ReviewSkipped, ReviewTimeout
from shared.review.client import Answer, ReviewClient
from shared.review.guard import Breaker, ShareBudget, TokenBucket
from shared.review.prompt import Opinion, Prompt
from shared.review.store import ReviewStore
from shared.settings import ReviewPolicy
from shared.stores.cache.tiered import TieredCache
from shared.telemetry import metrics

__all__ = ["ReviewStats", "Reviewer"]

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 1.0


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
        self._wait_s = policy.timeout_ms / 1000
        self._model = policy.deployment  # NOTE: the gen_ai.request.model of its metrics
        self._bucket = TokenBucket(policy.max_rps, policy.max_rps, clock())
        self._share = ShareBudget(policy.max_share)
        self.breaker = Breaker(policy.breaker_failures, policy.breaker_reset_s)
        self._tasks: set[asyncio.Task[Opinion]] = set()
        self._pending: set[str] = set()  # events answered "pending": their final record is owed
        self.stats = ReviewStats()
        # a review whose caller was told "pending" ended: (event id, its review, the verdict it
        # gave when done, else None: the local decision stands); the core appends it to the
        # prediction log as that decision's outcome
        self.settled: Callable[[str, Review, Verdict | None], None] | None = None

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
            if not task.done():  # NOTE: else it ended while the wait was called off: use its outcome
                self.stats.pending += 1
                self._pending.add(event.event_id)
                review = Review("pending", event.event_id)
                self._store.put(event.event_id, self._record(event, local, review))
                return local._replace(review=review)
        except ReviewFailed:
            pass
        return self._outcome(event, local, task)

    def _settled(self, task: asyncio.Task[Opinion]) -> None:
        """A review ended. NOTE: its failure is already kept (`_ended`) and counted; taking it here
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
        return self._verdict(event, local, opinion)

    def _verdict(self, event: PaymentEvent, local: Verdict, opinion: Opinion) -> Verdict:
        review = Review("done", event.event_id, risk_score=round(opinion.risk_score, 6), rationale=opinion.rationale)
        return Verdict(
            opinion.decision,
            f"reviewed by Azure OpenAI ({self._prompt.version})",
            {**local.scores, "llm": opinion.risk_score},
            review,
        )

    async def _review(self, event: PaymentEvent, score: float, local: Verdict) -> Opinion:
        """The whole review; its outcome is kept by event id, whoever still waits for it."""
        fields = self._prompt.fields(event, score, local.decision)
        try:
            opinion, tier = await self._answers.get_or_compute(self._prompt.key(fields), lambda: self._ask(fields))
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
        verdict = self._verdict(event, local, opinion)
        self._store.put(event.event_id, self._record(event, verdict, None))
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
                return  # NOTE: nobody was told to come back for it: nothing to keep
            review = Review("skipped", event.event_id, exc.detail)
        else:
            self.stats.failed += 1
            review = Review("failed", event.event_id, exc.detail)
        self._store.put(event.event_id, self._record(event, local, review))
        if told and self.settled is not None:
            self.settled(event.event_id, review, None)

    async def _ask(self, fields: dict[str, object]) -> Opinion:
        """One call to Azure OpenAI, if the bounds allow it now."""
        try:
            self._admit()
        except ReviewSkipped:
            metrics.llm_call(self._model, 0.0, outcome="skipped")
            raise
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
        except Exception as exc:  # NOTE: a fault of ours or of a library: a failure like any other
            self._failed(started, type(exc).__name__)
            raise ReviewFailed(f"no review: {type(exc).__name__}") from exc
        except BaseException:  # NOTE: cancelled (shutdown): no verdict on the endpoint
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

    def _admit(self) -> None:
        """Whether the bounds let a call go now: the breaker, then the rate, then the share."""
        now = self._clock()
        if not self.breaker.allow(now):
            raise ReviewSkipped(f"breaker open for {self.breaker.open_for(now):.1f} s")
        if not self._bucket.take(now):
            self.breaker.released()
            raise ReviewSkipped(f"rate limit of {self._policy.max_rps:g} reviews/s")
        if not self._share.spend():
            self.breaker.released()
            raise ReviewSkipped(f"share limit of {self._policy.max_share:.0%} of events")

    def _failed(self, started: float, error: str, exc: ReviewFailed | None = None) -> None:
        self.breaker.failed(self._clock(), getattr(exc, "retry_after_s", None))
        metrics.llm_breaker(self.breaker.state)
        outcome = "timeout" if error == "timeout" else "error"
        metrics.llm_call(self._model, time.perf_counter() - started, outcome=outcome, error=error)

    def _record(self, event: PaymentEvent, verdict: Verdict, review: Review | None) -> ReviewRecord:
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
            if self.settled is not None:  # NOTE: the local decision stands, and the log says why
                self.settled(event_id, Review("failed", event_id, "shutdown"), None)
        self._pending.clear()
        await self._store.drain()
        await self._client.aclose()
