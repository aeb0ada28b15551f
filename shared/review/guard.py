"""What bounds the reviews: a token bucket for their rate, a budget for their share, a breaker.

Each is a small object with one owner (the `Reviewer`), fed the time by its caller so
tests need no sleeps. None of them awaits: a refusal costs a comparison, never a wait.
"""

from __future__ import annotations

from shared.domain.answers import BreakerState

__all__ = ["Breaker", "BreakerState", "ShareBudget", "TokenBucket"]


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; a review takes one."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = max(1.0, burst)
        self._tokens = self.burst
        self._at = now

    def take(self, now: float) -> bool:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class ShareBudget:
    """At most `share` of the events offered are reviewed, with a little saved for bursts.

    Every scored event earns `share` of a review; a review spends one. The savings are
    capped at `burst`, so a quiet hour does not buy a flood of reviews.
    """

    def __init__(self, share: float, burst: float = 10.0) -> None:
        self.share = share
        self.burst = max(1.0, burst)
        self._credit = self.burst

    def earn(self) -> None:
        credit = self._credit + self.share
        self._credit = credit if credit < self.burst else self.burst

    def spend(self) -> bool:
        if self._credit >= 1.0:
            self._credit -= 1.0
            return True
        return False


class Breaker:
    """A circuit breaker: `failures` in a row open it for `reset_s`; then one probe decides.

    A 429's Retry-After keeps it open at least that long: the service asked us to wait.
    """

    def __init__(self, failures: int, reset_s: float) -> None:
        self.failures = failures
        self.reset_s = reset_s
        self.state: BreakerState = "closed"
        self.opened = 0  # times it opened: an operator's figure
        self._streak = 0
        self._until = 0.0
        self._probing = False

    def allow(self, now: float) -> bool:
        """Whether a call may go now (in half-open state, only the one probe)."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now < self._until:
                return False
            self.state = "half_open"
        if self._probing:
            return False
        self._probing = True
        return True

    def released(self) -> None:
        """The allowed call was not made after all: a half-open breaker may probe again."""
        self._probing = False

    def succeeded(self) -> None:
        self.state, self._streak, self._probing = "closed", 0, False

    def failed(self, now: float, retry_after_s: float | None = None) -> None:
        self._streak += 1
        self._probing = False
        if self.state == "half_open" or self._streak >= self.failures:
            self._open(now + max(self.reset_s, retry_after_s or 0.0))
        elif retry_after_s:
            self._open(now + retry_after_s)  # asked to wait: no call before then, however few failures

    def _open(self, until: float) -> None:
        if self.state != "open":
            self.opened += 1
        self.state = "open"
        self._until = until

    def open_for(self, now: float) -> float:
        """Seconds until it lets a probe through (0 when closed)."""
        return max(0.0, self._until - now) if self.state == "open" else 0.0
