"""The canary judge: each arm's last decisions, and whether the candidate must be aborted.

    window = Window(policy.canary_window)      # one per arm: the last N decisions, O(1) each
    window.add(code(decision))                 # approve, review, decline or error
    verdict(policy, live, candidate)           # "error_rate" | "decline_share" | None

Plain functions over two windows and the policy: shared/fleet/routes.py feeds them on the
request path (counting only, no I/O), and `python -m bench.canary_guard` runs the same rule.
"""

from __future__ import annotations

import math
from typing import Literal

from shared.domain.answers import ArmView
from shared.fleet.keys import Aborted, CanaryRecord, LastAbort
from shared.policies import RolloutPolicy

__all__ = ["DECLINE", "ERROR", "AbortReason", "Window", "Z", "aborted", "code", "verdict", "z"]

AbortReason = Literal["api", "decline_share", "error_rate"]
Z = 4.5  # the automatic abort also needs the difference this many standard errors away (`verdict`)
DECLINE, ERROR = 1, 2  # a decision's code in an arm's window (0: approve or review)
_CODES = {"decline": DECLINE, "error": ERROR}


def code(decision: str) -> int:
    """A decision's code in a window: DECLINE, ERROR, or 0 (approve, review)."""
    return _CODES.get(decision, 0)


class Window:
    """The last `size` decisions of one arm: running counts, O(1) per decision."""

    __slots__ = ("codes", "declines", "errors", "events", "next")

    def __init__(self, size: int) -> None:
        self.codes = bytearray(size)
        self.next = self.events = self.declines = self.errors = 0

    def add(self, code: int) -> None:
        codes, i = self.codes, self.next
        if self.events == len(codes):
            old = codes[i]
            self.declines -= old == DECLINE
            self.errors -= old == ERROR
        else:
            self.events += 1
        codes[i] = code
        self.declines += code == DECLINE
        self.errors += code == ERROR
        self.next = i + 1 if i + 1 < len(codes) else 0

    def shares(self) -> tuple[float | None, float | None]:
        """(decline share among the decisions taken, error rate among all) — None while empty."""
        decided = self.events - self.errors
        return (
            self.declines / decided if decided else None,
            self.errors / self.events if self.events else None,
        )

    def view(self, version: str) -> ArmView:
        decline, error = self.shares()
        return ArmView(
            version,
            self.events,
            self.declines,
            self.errors,
            None if decline is None else round(decline, 6),
            None if error is None else round(error, 6),
        )


def verdict(policy: RolloutPolicy, live: Window, candidate: Window) -> AbortReason | None:
    """Why the candidate must be aborted, or None.

    Once BOTH arms hold CANARY_MIN_EVENTS of their last CANARY_WINDOW decisions, the candidate
    is aborted when its error rate exceeds the live one's by more than CANARY_MAX_ERROR_DELTA,
    or its decline share (declines among the decisions taken, errors left out) differs from the
    live one's by more than CANARY_MAX_DECLINE_DELTA, either way, AND that difference is at
    least Z = 4.5 standard errors (a pooled two-proportion z statistic).

    Why both: the bound says how large a change matters ("5 points more declines"); the z
    test says it is not noise. The bound alone tripped on noise: simulated with both arms
    declining 10% and 10% of users on the candidate, 18% of healthy canaries tripped within
    5,000 candidate decisions (it is tested after every decision: many looks). With z >= 3,
    9.5%; with z >= 4.5, none of 200 runs (nor at a 30% decline share), while a candidate
    declining 7 points more still tripped in every run (median: its ~460th decision), one
    10 points more at its ~240th, one 7 points fewer at its ~350th (`python -m bench.canary_guard`
    runs this simulation through this very rule).
    It does not catch a shift smaller than a bound, a change of review share or of scores
    that keeps the decline share, harm confined to a small group of users, or a drift both
    arms share.
    """
    if live.events < policy.canary_min_events or candidate.events < policy.canary_min_events:
        return None
    live_decline, live_error = live.shares()
    decline, error = candidate.shares()
    if (
        error is not None
        and live_error is not None
        and error - live_error > policy.canary_max_error_delta
        and z(error, candidate.events, live_error, live.events) >= Z
    ):
        return "error_rate"
    if decline is None or live_decline is None:
        return None  # an arm that only erred: its error rate speaks for it
    decided, live_decided = candidate.events - candidate.errors, live.events - live.errors
    if abs(decline - live_decline) > policy.canary_max_decline_delta:
        return "decline_share" if abs(z(decline, decided, live_decline, live_decided)) >= Z else None
    return None


def z(share: float, events: int, live_share: float, live_events: int) -> float:
    """The two-proportion z statistic of a candidate's share against the live one's (pooled)."""
    pooled = (share * events + live_share * live_events) / (events + live_events)
    variance = pooled * (1.0 - pooled) * (1.0 / events + 1.0 / live_events)
    return (share - live_share) / math.sqrt(variance) if variance > 0 else 0.0


def aborted(record: CanaryRecord, reason: AbortReason, at: float) -> CanaryRecord:
    """`record`'s canary stopped at `at` for `reason`: weight 0, the abort kept as its last."""
    version = str(record.version)
    return CanaryRecord(version, 0.0, at, Aborted(reason, at), LastAbort(version, reason, at), record.sha256)
