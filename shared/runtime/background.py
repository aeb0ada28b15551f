"""Background work of the core: started with it, stopped with it, restarted if it crashes.

The core registers long-running jobs (a reload watcher, a telemetry exporter, a review
worker) with `add`; `start` runs each as a task inside the running loop and `aclose`
cancels them and waits. A job that raises is logged and restarted after `restart_s`, so
one bug cannot silently stop a job for the life of the process. This object alone owns
those tasks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

__all__ = ["Background", "Job"]

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class Background:
    """A supervisor of named jobs."""

    def __init__(self, *, restart_s: float = 1.0, stop_s: float = 2.0, settle_s: float = 5.0) -> None:
        self._stop_s = stop_s
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._restart_s = restart_s
        self._settle_s = settle_s
        self._running = False
        self._serving: set[str] = set()
        self._failed: dict[str, tuple[str, float]] = {}  # name -> (why, when its latest attempt started)
        self.restarts: dict[str, int] = {}

    def add(self, name: str, job: Job, *, serving: bool = False) -> None:
        """Register `job` (started now if the supervisor already runs). `serving`: a listener the
        replica is reached through (a server on a port), whose failure `failing` reports."""
        if name in self._jobs:
            raise ValueError(f"a background job named {name!r} exists")
        self._jobs[name] = job
        if serving:
            self._serving.add(name)
        if self._running:
            self._spawn(name)

    def failing(self) -> dict[str, str]:
        """The serving jobs that failed and have not yet run `settle_s` since: name -> why."""
        now = time.monotonic()
        for name, (_, since) in list(self._failed.items()):
            if since and now - since >= self._settle_s:
                del self._failed[name]
        return {name: why for name, (why, _) in self._failed.items() if name in self._serving}

    def start(self) -> None:
        """Start every registered job (inside the running loop)."""
        self._running = True
        for name in self._jobs:
            if name not in self._tasks:
                self._spawn(name)

    @property
    def running(self) -> list[str]:
        return sorted(name for name, task in self._tasks.items() if not task.done())

    async def aclose(self) -> None:
        """Cancel every job and wait for it to end (at most `stop_s`: a stuck job never blocks shutdown)."""
        self._running = False
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=self._stop_s)
            for task in stuck:
                log.warning("background job %s did not stop within %.1f s", task.get_name(), self._stop_s)

    def _spawn(self, name: str) -> None:
        self._tasks[name] = asyncio.get_running_loop().create_task(self._supervise(name), name=f"background:{name}")

    async def _supervise(self, name: str) -> None:
        job = self._jobs[name]
        while True:
            if name in self._failed:
                self._failed[name] = (self._failed[name][0], time.monotonic())
            try:
                await job()
                self._failed.pop(name, None)
                return  # a job that returns is done
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self._failed[name] = (f"{type(exc).__name__}: {exc}", 0.0)
                log.exception("background job %s failed; restarting in %.1f s", name, self._restart_s)
                await asyncio.sleep(self._restart_s)
