"""An event under a canary split: its user's arm scores it, and the decision is counted.

The candidate's decisions (or errors) feed the fleet's automatic abort (shared/fleet/canary.py).
A candidate that fails to score is counted as an error and the live version answers: a bad
candidate costs its users nothing but the wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from shared.errors import InferenceFailed

if TYPE_CHECKING:
    from shared.core.answer import Scoring
    from shared.domain.answers import Scored
    from shared.domain.events import PaymentEvent
    from shared.domain.records import Arm
    from shared.fleet.traffic import Traffic
    from shared.models.served import Served

__all__ = ["ScoreOn", "by_arm"]

ScoreOn = Callable[["PaymentEvent", "Served", "Scoring", "Arm | None"], Awaitable["Scored"]]


async def by_arm(
    event: PaymentEvent, name: str, live: Served, traffic: Traffic, scoring: Scoring, score_on: ScoreOn
) -> Scored:
    """`event` scored by its user's arm of `name` with `score_on(event, served, scoring, arm)`."""
    candidate = traffic.canary_for(name, event.user_id)
    if candidate is not None:
        try:
            scored = await score_on(event, candidate, scoring, "canary")
        except InferenceFailed:
            traffic.observe(name, "canary", "error")
        else:
            traffic.observe(name, "canary", scored.decision)
            return scored
        return await score_on(event, live, scoring, None)
    try:
        scored = await score_on(event, live, scoring, "live")
    except InferenceFailed:
        traffic.observe(name, "live", "error")
        raise
    traffic.observe(name, "live", scored.decision)
    return scored
