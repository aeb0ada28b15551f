"""Single-flight: concurrent misses on one key make one backend call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """The first caller for a key runs `fn`; callers arriving meanwhile share its outcome."""

    def __init__(self) -> None:
        self._calls: dict[K, asyncio.Future[V]] = {}
        self.shared = 0

    async def do(self, key: K, fn: Callable[[], Awaitable[V]]) -> V:
        while (running := self._calls.get(key)) is not None:
            self.shared += 1
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # this caller was cancelled
                # the leader was cancelled, not us: try again (perhaps as the leader)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._calls[key] = future
        try:
            value = await fn()
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # marks it retrieved when no follower was waiting
            raise
        except BaseException:
            future.cancel()
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del self._calls[key]
