"""Admission control: how much scoring work one process takes at once, and how long the rest waits.

At most `max_inflight` requests are in the work. A request that arrives while every slot
is taken waits its turn, for up to MAX_QUEUE_WAIT_MS. A burst, a GC pause or a noisy
neighbour makes requests wait a little; it refuses none.

A queue that stays is overload, not a burst. The rule is CoDel's (Nichols and Jacobson,
"Controlling Queue Delay", ACM Queue 10(5), 2012; RFC 8289), applied to requests as
Facebook's servers do (Maurer, "Fail at Scale", ACM Queue 13(8), 2015): when every request
handed a slot for a whole INTERVAL_S had waited longer than QUEUE_TARGET_MS, the queue is
*standing*, and it stays so until it empties. While it stands, a request may wait at most
QUEUE_TARGET_MS instead of MAX_QUEUE_WAIT_MS.

A refusal (`Overloaded`: a 503 with Retry-After) is early and cheap: a request is turned
away at arrival, before its body is read, when MAX_QUEUED requests already wait, or when
the queue stands and the wait it would have (the waiters ahead of it times the measured
interval between slots freed) exceeds QUEUE_TARGET_MS. A waiter whose wait runs out all
the same is refused then.

A request admitted has `request_timeout_ms` to finish; past it the work is cancelled
(`DeadlineExceeded`, also a 503 with Retry-After) and the slot freed. One sweeper
(shared/runtime/deadlines.py) keeps the deadlines of every request in the work.

Every entry takes admission the same way: `async with admission.admitted(): ...` (single
events, named models, batches, V2 REST and gRPC). This object alone owns the slots, the
wait queue and the counts of what it admitted and refused.

A V2 request's tensors cost event-loop time to decode (a 1 MiB BYTES tensor ~130 ms), so the
core's V2 entry (`ScoringService.infer_decoded`) decodes inside its slot: a flood of large
bodies is counted and refused like any other work, before it is decoded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from types import TracebackType

from shared.domain.answers import AdmissionStats
from shared.errors import DeadlineExceeded, Overloaded
from shared.policies import AdmissionPolicy
from shared.runtime.deadlines import Deadlines
from shared.telemetry import metrics

__all__ = ["INTERVAL_S", "Admission", "Admitted"]

RECENT_S = 10.0  # readiness says "overloaded" this long after the last refusal
INTERVAL_S = 0.1  # waits past target for this long: the queue stands (CoDel's interval)
RELEASE_ALPHA = 0.05  # weight of the newest interval between slots freed in its moving average


class _Waiter:
    __slots__ = ("future", "since", "timer")

    def __init__(self, future: asyncio.Future[None], since: float) -> None:
        self.future = future
        self.since = since
        self.timer: asyncio.TimerHandle | None = None


class Admission:
    """Slots for the work, a bounded wait for the rest, and a deadline for what is admitted."""

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self.limit = policy.max_inflight
        self.timeout_s = policy.request_timeout_ms / 1000
        self._max_wait_s = policy.max_queue_wait_ms / 1000
        self._target_s = policy.queue_target_ms / 1000
        # a deadline is honoured within a tenth of itself (at most 100 ms late)
        self.deadlines = Deadlines(tick_s=min(0.1, self.timeout_s / 10))
        self.inflight = 0
        self.total_admitted = 0
        self.waited = 0  # admitted after a wait for a slot
        self.shed = 0
        self.timed_out = 0
        self._waiting: deque[_Waiter] = deque()
        self._above_since: float | None = None  # since when every waiter handed a slot waited past target
        self._standing = False
        self._release_s = 0.0  # moving average of the interval between slots freed while some wait
        self._released_at = 0.0
        self._last_refused = float("-inf")

    # -- what every entry calls ---------------------------------------------------------

    def admitted(self) -> Admitted:
        """`async with admission.admitted():` a slot (waiting for one if need be), then the
        work under the request deadline; `Overloaded` or `DeadlineExceeded` otherwise."""
        return Admitted(self)

    def refuses(self) -> bool:
        """Whether a request arriving now is turned away at once (then it is counted as shed):
        every slot taken, and the wait queue full, or standing and too slow for QUEUE_TARGET_MS.

        Only a standing queue is judged by its estimate (one stall measured is not a queue),
        and the first in line always waits, so a stale estimate can never refuse everything."""
        if not self.limit or self.inflight < self.limit:
            return False
        ahead = len(self._waiting)
        if ahead < self.policy.max_queued and not (
            self._standing and ahead and (ahead + 1) * self._release_s > self._target_s
        ):
            return False
        self._refused()
        return True

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def standing(self) -> bool:
        """Whether the queue stands: the requests handed a slot over a whole interval had all
        waited past QUEUE_TARGET_MS (overload, not a burst); it stands until it empties."""
        return self._standing

    def _allowed_s(self) -> float:
        return self._target_s if self._standing else self._max_wait_s

    # -- slots ------------------------------------------------------------------------------

    async def take(self) -> None:
        """A slot for the current request: at once if one is free, else after a bounded wait."""
        if not self.limit or (self.inflight < self.limit and not self._waiting):
            self.inflight += 1
            self.total_admitted += 1
            return
        if self.refuses():
            raise Overloaded(
                f"{self.inflight} requests in progress and {len(self._waiting)} waiting, about "
                f"{self._release_s * 1000:.2f} ms apart (MAX_INFLIGHT {self.limit}, MAX_QUEUED "
                f"{self.policy.max_queued}): try again shortly"
            )
        await self._wait()

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        waiter = _Waiter(loop.create_future(), now)
        if not self._waiting:
            self._released_at = now  # the interval between slots freed is measured while some wait
        limit_s = self._allowed_s()
        waiter.timer = loop.call_later(limit_s, self._expire, waiter, limit_s)
        self._waiting.append(waiter)
        try:
            await waiter.future  # resolved by `leave` (the slot passes over) or `_expire`
        except BaseException:
            if not waiter.future.done() or waiter.future.cancelled():
                self._forget(waiter)  # cancelled from outside while waiting
            elif waiter.future.exception() is None:
                self.leave()  # NOTE: handed a slot in the same tick as a cancellation: give it on
            raise
        self.total_admitted += 1
        self.waited += 1

    def _expire(self, waiter: _Waiter, limit_s: float) -> None:
        if waiter.future.done():
            return
        self._forget(waiter)
        self._refused()
        waiter.future.set_exception(
            Overloaded(
                f"no slot within {limit_s * 1000:.0f} ms ({self.inflight} requests in progress, "
                f"{len(self._waiting)} waiting; MAX_INFLIGHT {self.limit}): try again shortly"
            )
        )

    def _forget(self, waiter: _Waiter) -> None:
        if waiter.timer is not None:
            waiter.timer.cancel()
        try:
            self._waiting.remove(waiter)
        except ValueError:
            return
        if not self._waiting:
            self._emptied()

    def _emptied(self) -> None:
        """The wait queue is empty: it stands no more, and its next one is measured afresh."""
        self._above_since, self._standing, self._release_s = None, False, 0.0

    def leave(self) -> None:
        """Give the slot back: to the longest waiter still waiting, or free it."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if waiter.timer is not None:
                waiter.timer.cancel()
            if waiter.future.done():
                continue  # cancelled in this tick, its task not yet run to leave the queue
            self._handed(waiter, time.monotonic())
            waiter.future.set_result(None)  # the slot passes over; inflight is unchanged
            return
        self._emptied()
        self.inflight -= 1

    def _handed(self, waiter: _Waiter, now: float) -> None:
        """CoDel's bookkeeping at each hand-over: the interval between slots freed, and whether
        the waits have stayed past the target for a whole interval."""
        interval = now - self._released_at
        self._release_s = (
            interval if not self._release_s else self._release_s + RELEASE_ALPHA * (interval - self._release_s)
        )
        self._released_at = now
        if not self._waiting:
            self._emptied()
        elif self._standing:
            pass  # once standing, it stands until it empties (waits near the target would flap it)
        elif now - waiter.since < self._target_s:
            self._above_since = None
        elif self._above_since is None:
            self._above_since = now
        elif now - self._above_since >= INTERVAL_S:
            self._standing = True

    def _refused(self) -> None:
        self.shed += 1
        self._last_refused = time.monotonic()
        metrics.shed("overloaded")

    # -- deadlines -----------------------------------------------------------------------------

    def expired(self, task: asyncio.Task[object]) -> DeadlineExceeded | None:
        """After a cancellation of `task`: the error to answer with if its deadline did it."""
        if not self.deadlines.expired(task):
            return None
        self.timed_out += 1
        self._last_refused = time.monotonic()
        metrics.shed("deadline")
        return DeadlineExceeded(f"the work took longer than REQUEST_TIMEOUT_MS ({self.timeout_s * 1000:.0f} ms)")

    # -- what adapters report --------------------------------------------------------------------

    def problem(self) -> str:
        """What readiness lists while this process turns work away (it stays ready: shedding is its job)."""
        if time.monotonic() - self._last_refused > RECENT_S:
            return ""
        return (
            f"overloaded: requests refused or timed out in the last {RECENT_S:.0f} s "
            f"(shed {self.shed}, timed out {self.timed_out} since start)"
        )

    def stats(self) -> AdmissionStats:
        """The limits and the counters (`/api/stats`)."""
        return AdmissionStats(
            self.limit,
            self.inflight,
            self.policy.max_queued,
            len(self._waiting),
            self.policy.max_queue_wait_ms,
            self.policy.queue_target_ms,
            self.total_admitted,
            self.waited,
            self.shed,
            self.timed_out,
            self.policy.request_timeout_ms,
        )


class Admitted:
    """One request's admission: a slot on enter, the request deadline while inside, the slot
    back on exit; a cancellation by the deadline leaves as `DeadlineExceeded`."""

    __slots__ = ("_admission", "_task")
    _task: asyncio.Task[object]  # the request's task, set on enter

    def __init__(self, admission: Admission) -> None:
        self._admission = admission

    async def __aenter__(self) -> None:
        admission = self._admission
        if admission.inflight < admission.limit and not admission._waiting:  # NOTE: `take`, inlined: the hot path
            admission.inflight += 1
            admission.total_admitted += 1
        else:
            await admission.take()
        self._task = admission.deadlines.arm(admission.timeout_s)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        admission, task = self._admission, self._task
        try:
            if kind is not None and (late := admission.expired(task)) is not None:
                raise late from None  # the deadline cancelled the work, whatever it raised then
        finally:
            admission.deadlines.disarm(task)
            admission.leave()
