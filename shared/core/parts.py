"""The one component protocol of the core: each collaborator as a name, a problem, a job, a close.

The core starts every part's job with itself, lists every part's problem in readiness, and closes
the parts in their order at shutdown (shared/core/wiring.py builds the list; the order is the close
order: what hands records on to the log closes before the log, the log before the stores).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Part"]


@dataclass(frozen=True, slots=True)
class Part:
    """One collaborator of the core.

    name     its name in readiness and among the background jobs
    problem  why it serves less than it should now (readiness lists it as degraded), or None
    run      its long-running job, supervised by the core's `Background` (restarted if it raises)
    close    awaited at shutdown, after every job has stopped
    """

    name: str
    problem: Callable[[], str | None] | None = None
    run: Callable[[], Awaitable[None]] | None = None
    close: Callable[[], Awaitable[None]] | None = None
