"""Admission control: how much scoring work one process takes at once, and for how long.

Past `limit` requests in the work, the next one is turned away at once (`Overloaded`: a 503
with Retry-After) rather than queued behind requests that are already late. A refusal costs
the process microseconds; a queue would cost every caller behind it its latency, and past
the caller's own timeout the work would be done for no one. The callers' retries go to
another replica (the load balancer's choice) or come back after Retry-After.

A request admitted has `timeout_s` to finish once its body is read; past it the work is
cancelled (`DeadlineExceeded`, also a 503 with Retry-After) and the slot freed. One sweeper
(shared/deadlines.py) keeps the deadlines of every request in the work.

This object alone owns the counts of the work in progress and of what it refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from shared.deadlines import Deadlines
from shared.errors import DeadlineExceeded, Overloaded
from shared.telemetry import metrics

__all__ = ["Admission"]

T = TypeVar("T")
RECENT_S = 10.0  # readiness says "overloaded" this long after the last refusal
PROBE_S = 0.002  # how often the watch measures the event loop's lag
WINDOW_S = 0.01  # the lag taken is the least of a window's probes: a standing queue, not a burst


class Admission:
    """At most `limit` requests in the work (0: no cap), each done within `timeout_s`."""

    def __init__(self, limit: int, timeout_s: float, max_lag_s: float = 0.0) -> None:
        self.limit = limit
        self.timeout_s = timeout_s
        self.max_lag_s = max_lag_s
        self.lag_s = 0.0  # the event loop's standing lag, as the last window measured it
        self.congested = False
        # NOTE: a deadline is honoured within a tenth of itself (at most 100 ms late)
        self.deadlines = Deadlines(tick_s=min(0.1, timeout_s / 10))
        self.inflight = 0
        self.admitted = 0
        self.shed = 0
        self.timed_out = 0
        self._last_refused = float("-inf")

    def refuses(self, *, lag: bool = True) -> bool:
        """Whether the next request is turned away (then it is counted as shed).

        `lag`: the standing lag counts too. Only the single-event lane asks it: a batch request
        is the cheapest work per event there is, and refusing it would not lower the lag.
        """
        if not ((lag and self.congested) or (self.limit and self.inflight >= self.limit)):
            return False
        self.shed += 1
        self._last_refused = time.monotonic()
        metrics.shed("overloaded")
        return True

    def enter(self) -> None:
        """Take a slot, or raise `Overloaded` at once; every `enter` that returns needs a `leave`."""
        if self.refuses(lag=False):
            raise Overloaded(f"{self.inflight} requests in progress (MAX_INFLIGHT {self.limit}): try again shortly")
        self.inflight += 1
        self.admitted += 1

    def leave(self) -> None:
        self.inflight -= 1

    async def watch(self) -> None:
        """Measure the event loop's standing lag (how late a timer runs: what every request
        waits before its turn) and shed while the least lag of a window exceeds `max_lag_s`."""
        if not self.max_lag_s:
            return
        loop = asyncio.get_running_loop()
        least, window_end = float("inf"), loop.time() + WINDOW_S
        while True:
            due = loop.time() + PROBE_S
            await asyncio.sleep(PROBE_S)
            now = loop.time()
            least = min(least, now - due)
            if now >= window_end:
                self.lag_s, self.congested = least, least > self.max_lag_s
                least, window_end = float("inf"), now + WINDOW_S

    def expired(self, task: asyncio.Task[object]) -> DeadlineExceeded | None:
        """After a cancellation of `task`: the error to answer with if its deadline did it."""
        if not self.deadlines.expired(task):
            return None
        self.timed_out += 1
        self._last_refused = time.monotonic()
        metrics.shed("deadline")
        return DeadlineExceeded(f"the work took longer than REQUEST_TIMEOUT_MS ({self.timeout_s * 1000:.0f} ms)")

    async def within(self, work: Awaitable[T]) -> T:
        """`work` under the request deadline (the slot is the caller's: `enter`/`leave`)."""
        task = self.deadlines.arm(self.timeout_s)
        try:
            return await work
        except asyncio.CancelledError:
            if (exc := self.expired(task)) is not None:
                raise exc from None
            raise
        finally:
            self.deadlines.disarm(task)

    def problem(self) -> str:
        """What readiness lists while this process turns work away (it stays ready: shedding is its job)."""
        if time.monotonic() - self._last_refused > RECENT_S:
            return ""
        return (
            f"overloaded: requests refused or timed out in the last {RECENT_S:.0f} s "
            f"(shed {self.shed}, timed out {self.timed_out} since start)"
        )

    def describe(self) -> dict[str, object]:
        return {
            "max_inflight": self.limit,
            "inflight": self.inflight,
            "admitted": self.admitted,
            "shed": self.shed,
            "timed_out": self.timed_out,
            "request_timeout_ms": round(self.timeout_s * 1000),
        }
