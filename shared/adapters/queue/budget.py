"""A queue batch's time budget (QUEUE_BATCH_BUDGET_MS), and work held to it.

The host renews no lock of a batch invocation (docs/platform.md P1): a message is locked from
its receipt until the host completes it after the handler returns, so the whole batch, review
waits, overload waits and publisher retries included, must end well inside the queue's lock
duration (the infra lock check sizes both). Scoring ends `publish_s` before the budget does;
what it has not finished by then fails (and is redelivered); the send gets what is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from shared.errors import DeadlineExceeded

__all__ = ["BatchBudget", "by"]


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


async def by(until: float, work: Awaitable[Any], what: str) -> Any:
    """`work`, or `DeadlineExceeded` once loop time `until` passes (a share of the batch budget)."""
    try:
        async with asyncio.timeout_at(until):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"{what} outlasted the queue batch budget (QUEUE_BATCH_BUDGET_MS)") from None
