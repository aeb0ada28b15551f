"""Deadlines for many short waits, kept by one sweeper instead of a timer each.

`asyncio.timeout` arms and disarms a loop timer per use: about 7 µs of CPU on a score
request that costs under 100 µs in all. Here a wait costs two dict operations, and one
task, alive only while some wait is armed, wakes every `tick_s` and cancels the waits
past their deadline. Deadlines are honoured within `tick_s` (a body deadline of seconds
needs no finer grain). This object alone owns the armed waits and the sweeper.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["Deadlines"]


class Deadlines:
    """Cancel a task that overruns its deadline; tell it apart from any other cancellation."""

    def __init__(self, *, tick_s: float = 0.1) -> None:
        self._due: dict[asyncio.Task[object], float] = {}
        self._expired: set[asyncio.Task[object]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._tick = tick_s

    def arm(self, seconds: float) -> asyncio.Task[object]:
        """Give the current task `seconds`; call `disarm` when its wait is over."""
        task: asyncio.Task[object] = asyncio.current_task()  # type: ignore[assignment]
        self._due[task] = time.monotonic() + seconds
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="deadlines")
        return task

    def disarm(self, task: asyncio.Task[object]) -> None:
        self._due.pop(task, None)
        if task in self._expired:  # the wait swallowed its deadline's cancellation: take it back
            self._expired.discard(task)
            task.uncancel()

    def expired(self, task: asyncio.Task[object]) -> bool:
        """Whether `task` was cancelled by its deadline alone (then the cancellation is taken back);
        a cancellation from elsewhere in the same tick stays a cancellation."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        return task.uncancel() == 0

    @property
    def armed(self) -> int:
        return len(self._due)

    async def _sweep(self) -> None:
        try:
            while self._due:
                await asyncio.sleep(self._tick)
                now = time.monotonic()
                for task in [t for t, due in self._due.items() if due <= now]:
                    del self._due[task]
                    self._expired.add(task)
                    task.cancel()
        finally:
            self._sweeper = None
