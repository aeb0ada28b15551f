"""A sliding-window micro-batcher: it alone owns the queue, the window and the futures.

Rules (the design notes' batching decision):
- a request that finds the runner idle is dispatched at once (after one loop tick,
  so requests that arrived in the same tick share its batch): no window at low load;
  with one slot, nothing queued and the last batch alone, it runs its batch in its own
  task (`_lead`);
- while a batch runs, requests queue; a batch opens with the oldest queued request
  and is dispatched when it holds `max_size` requests, or when its oldest request
  has waited `window_ms`, or when the runner falls idle, whichever comes first
  (a slot must be free: at most `max_concurrency` batches run at once);
- a batch fails together: if the run raises, or returns a number of results other
  than the number of items, every request of that batch gets the error;
- the queue is bounded (`max_queue`): past it a request is refused at once
  (`Overloaded`), never queued behind work that could not finish in time.

The batcher knows nothing of payload shapes: `run` takes a list of items and
returns a list of results in the same order (see `rows.py` for tensors).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from shared.errors import BatcherClosed, BatchShapeError, Overloaded
from shared.policies import BatchPolicy
from shared.telemetry import metrics

__all__ = ["Batcher", "BatcherClosed", "Completed"]

T = TypeVar("T")
R = TypeVar("R")


class Completed(NamedTuple, Generic[R]):
    """One request's result with where its time went."""

    value: R
    queued_s: float
    run_s: float
    batch_size: int


@dataclass(slots=True)
class _Pending(Generic[T, R]):
    item: T
    future: asyncio.Future[Completed[R]]
    arrived: float


class Batcher(Generic[T, R]):
    """Groups `submit`ted items into calls of `run`.

    Create it anywhere; its asyncio objects are made lazily inside the running loop.
    """

    def __init__(
        self,
        run: Callable[[list[T]], Awaitable[list[R]]],
        policy: BatchPolicy,
        *,
        max_concurrency: int = 1,
        name: str = "batcher",
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self._run = run
        self._policy = policy
        self._max_concurrency = max_concurrency
        self.name = name
        self._queue: deque[_Pending[T, R]] = deque()
        self._in_flight = 0
        self._closing = False
        self._changed: asyncio.Event | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._runs: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.items = 0
        self.shed = 0
        self._last_size = 1  # the last batch's size: 1 at low load, where `_lead` serves

    @property
    def closing(self) -> bool:
        """Draining: its version is being retired; new work goes to the next one."""
        return self._closing

    async def submit(self, item: T) -> Completed[R]:
        """Queue one item and wait for its result."""
        if self._closing:
            raise BatcherClosed(f"{self.name} is draining")
        if len(self._queue) >= self._policy.max_queue:
            self.shed += 1
            metrics.shed("overloaded")
            raise Overloaded(f"{self.name}: {len(self._queue)} rows queued, all it holds: try again shortly")
        loop = asyncio.get_running_loop()
        pending: _Pending[T, R] = _Pending(item, loop.create_future(), time.perf_counter())
        if self._in_flight == 0 and not self._queue and self._last_size == 1 and self._max_concurrency == 1:
            return await self._lead(pending)
        self._queue.append(pending)
        self._poke()
        return await pending.future

    async def _lead(self, pending: _Pending[T, R]) -> Completed[R]:
        """The runner is idle, nothing waits and the last batch ran alone (low load): this
        request runs its batch in its own task.

        NOTE: it takes the one slot at once, lets one loop tick pass (requests woken in the
        same tick queue behind it), then runs alone in its own task: no wake-up of the
        dispatcher and none of its own future, two loop iterations fewer for a lone request
        (docs/benchmark.md). Joined by others, it hands the batch to a task of its own, so
        cancelling this request never fails theirs. Under load (the last batch held more than
        one) requests take the dispatcher's path, whose extra ticks let more of them share a
        batch: the lead path alone cost ~4% of miss req/s at 16 connections.
        """
        self._in_flight += 1
        self._queue.append(pending)
        try:
            await asyncio.sleep(0)
        except BaseException:
            pending.future.cancel()  # cancelled before its run: `_take` skips it
            self._in_flight -= 1
            self._poke()
            raise
        if len(self._queue) == 1 and self._queue[0] is pending:
            self._queue.popleft()
            await self._run_batch([pending])
        else:
            self._in_flight -= 1  # `_start` takes the slot again for the batch's own task
            self._start(self._take())
            self._poke()
        return await pending.future

    async def drain(self) -> None:
        """Refuse new items, finish the queued and running ones, then stop."""
        self._closing = True
        self._poke()
        while self._queue or self._in_flight:
            await self._wait_change(None)
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            self._dispatcher = None

    # -- the dispatcher: the one task that decides when a batch runs ------------

    def _poke(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.set()
        if (self._dispatcher is None or self._dispatcher.done()) and self._queue:
            self._dispatcher = asyncio.get_running_loop().create_task(self._dispatch_loop())

    async def _wait_change(self, timeout: float | None) -> None:
        assert self._changed is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        self._changed.clear()
        if timeout is None:
            await self._changed.wait()
            return
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass

    async def _dispatch_loop(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    self._poke()  # NOTE: drain() may be waiting for exactly this
                    return
                await self._wait_change(None)
                continue
            if self._in_flight >= self._max_concurrency:
                await self._wait_change(None)
                continue
            if self._in_flight == 0:
                # one tick lets requests already woken in this loop iteration join.
                await asyncio.sleep(0)
            elif len(self._queue) < self._policy.max_size:
                wait = self._queue[0].arrived + self._policy.window_s - time.perf_counter()
                if wait > 0:
                    await self._wait_change(wait)
                    continue
            batch = self._take()
            if batch and self._max_concurrency == 1:
                # one slot: the dispatcher would only wait for it, so it runs the batch itself
                self._in_flight += 1
                await self._run_batch(batch)
            else:
                self._start(batch)

    def _take(self) -> list[_Pending[T, R]]:
        batch: list[_Pending[T, R]] = []
        while self._queue and len(batch) < self._policy.max_size:
            pending = self._queue.popleft()
            if not pending.future.done():  # cancelled by its caller: skip it
                batch.append(pending)
        return batch

    def _start(self, batch: list[_Pending[T, R]]) -> None:
        if not batch:
            return
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._run_batch(batch))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    async def _run_batch(self, batch: list[_Pending[T, R]]) -> None:
        started = time.perf_counter()
        try:
            results = await self._run([p.item for p in batch])
            if len(results) != len(batch):
                raise BatchShapeError(f"{self.name}: {len(batch)} items in, {len(results)} results out")
        except BaseException as exc:
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            run_s = time.perf_counter() - started
            for pending, value in zip(batch, results, strict=True):
                if not pending.future.done():
                    queued = started - pending.arrived
                    pending.future.set_result(Completed(value, queued, run_s, len(batch)))
        finally:
            self.batches += 1
            self.items += len(batch)
            self._last_size = len(batch)
            self._in_flight -= 1
            if self._queue or self._closing:  # only then can anyone be waiting for a slot
                self._poke()
