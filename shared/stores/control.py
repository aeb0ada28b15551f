"""Records the API reports as kept (pins, model records, reviews' outcomes): a store whose writes raise.

The caches' tier turns every failure into a miss, which is right for a cache and wrong for
a write the API reports as done: a pin that was never written would answer "pinned" while
the other replicas serve on. Here every call runs under a deadline and a failure is
`ControlStoreDown` (a 503 naming Redis), so the caller knows the record was not kept and
changes nothing it could not announce.

Control records carry no TTL: under volatile-lru only keys with a TTL are evicted, so a
flood of cache writes never evicts a pin (reviews' outcomes carry their REVIEW_TTL_S). A FLUSHDB (or a failover to an empty replica) can still
remove them; shared/fleet/rollout.py restores what it finds missing.

`RedisControlStore` is the real store; `MemoryControlStore` is the fake for tests of other
code (`down=True` fails every call, as an outage would). Redis itself is tested against a
real server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from shared.errors import ControlStoreDown

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ControlStore", "MemoryControlStore", "RedisControlStore"]

T = TypeVar("T")
RECENT_S = 10.0  # a failure this recent shows in readiness, unless a call succeeded since


class ControlStore(Protocol):
    """Small records by key, without expiry; every failure raises `ControlStoreDown`."""

    async def read(self, keys: Sequence[str]) -> list[bytes | None]: ...

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        """Store `value` unless `key` holds one; whether it was stored."""
        ...

    def problem(self) -> str | None:
        """Why control records cannot be read or written now (readiness shows it), or None."""
        ...

    async def aclose(self) -> None: ...


class _Health:
    """The last failure and the last success of a store's calls, for readiness."""

    def __init__(self) -> None:
        self.failed_at: float | None = None
        self.failure = ""
        self.succeeded_at = 0.0

    def problem(self) -> str | None:
        failed_at = self.failed_at
        if failed_at is None or self.succeeded_at > failed_at or time.monotonic() - failed_at > RECENT_S:
            return None
        ago = time.monotonic() - failed_at
        return f"control: redis {self.failure} {ago:.0f} s ago: pins, model records and reviews cannot be kept"


class RedisControlStore:
    """Records in Redis under `prefix + key`."""

    def __init__(self, client: Redis, *, prefix: str = "", timeout_s: float = 1.0) -> None:
        self._client = client
        self._prefix = prefix
        self._timeout = timeout_s
        self._health = _Health()

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "", use_entra: bool = False, timeout_s: float = 1.0
    ) -> RedisControlStore:
        """A store over `url`; `use_entra` authenticates with a Microsoft Entra token (managed identity)."""
        from shared.stores.cache.redis_tier import redis_client

        return cls(redis_client(url, timeout_s=timeout_s, use_entra=use_entra), prefix=prefix, timeout_s=timeout_s)

    async def read(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        values = await self._call(self._client.mget([self._prefix + k for k in keys]))
        return [v.encode() if isinstance(v, str) else v for v in values]  # NOTE: the client never decodes

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        px = max(1, int(ttl_s * 1000)) if ttl_s else None
        await self._call(self._client.set(self._prefix + key, value, px=px))

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        return bool(await self._call(self._client.set(self._prefix + key, value, nx=True)))

    def problem(self) -> str | None:
        return self._health.problem()

    async def _call(self, call: Awaitable[T]) -> T:
        from redis.exceptions import RedisError

        try:
            async with asyncio.timeout(self._timeout):
                result = await call
            _honour_cancel()
        except (RedisError, OSError, TimeoutError) as exc:
            self._health.failed_at, self._health.failure = time.monotonic(), type(exc).__name__
            if isinstance(exc, TimeoutError):  # NOTE: a write may have landed all the same
                detail = "redis did not answer in time (TimeoutError): the fleet's record may or may not have changed"
            else:
                detail = f"redis failed ({type(exc).__name__}): the fleet's record was not changed"
            raise ControlStoreDown(f"{detail}; this replica changed nothing (GET /api/models); try again") from exc
        self._health.succeeded_at = time.monotonic()
        return result

    async def aclose(self) -> None:
        await self._client.aclose()


def _honour_cancel() -> None:
    """Raise a cancellation of this task that redis-py swallowed.

    NOTE: CPython 3.11's `asyncio.wait_for` returns the result of an awaitable that completes in
    the same loop turn as a cancel, and drops the cancel (gh-86296; fixed in 3.12); redis-py sends
    each command through it when a socket timeout is set. The fleet's watches (pins, shadows,
    canaries) read here in a loop: one cancelled mid-read ran on after shutdown stopped waiting for
    it (reproduced: about 1 cancel in 10 landing on a read; tests/fleet/test_traffic.py).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class MemoryControlStore:
    """Records in this process; `down=True` fails every call."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.down = False
        self._health = _Health()

    async def read(self, keys: Sequence[str]) -> list[bytes | None]:
        self._check()
        return [self.data.get(k) for k in keys]

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._check()
        self.data[key] = value  # NOTE: no expiry here: a fake for tests of other code

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        self._check()
        if key in self.data:
            return False
        self.data[key] = value
        return True

    def problem(self) -> str | None:
        return self._health.problem()

    def _check(self) -> None:
        if self.down:
            self._health.failed_at, self._health.failure = time.monotonic(), "down"
            raise ControlStoreDown("redis did not keep the fleet's record (down): nothing was changed; try again")
        self._health.succeeded_at = time.monotonic()

    async def aclose(self) -> None:
        self.data.clear()
