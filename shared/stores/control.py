"""Records the API reports as kept (pins, model records, reviews' outcomes): a store whose writes raise.

The caches' tier turns every failure into a miss, which is right for a cache and wrong for
a write the API reports as done: a pin that was never written would answer "pinned" while
the other replicas serve on. Here every call runs under a deadline and a failure is
`ControlStoreDown` (a 503 naming Redis), so the caller knows the record was not kept and
changes nothing it could not announce.

Control records carry no TTL: under volatile-lru only keys with a TTL are evicted, so a
flood of cache writes never evicts a pin (reviews' outcomes carry their REVIEW_TTL_S). A FLUSHDB (or a failover to an empty replica) can still
remove them; shared/fleet/versions.py restores what it finds missing.

`RedisControlStore` is the real store; `MemoryControlStore` is the fake for tests of other
code (`down=True` fails every call, as an outage would). Redis itself is tested against a
real server.

`ControlAudit` keeps who did each control action, what, when and why: a line on the audit
stream (the `shared.audit` logger, which Application Insights keeps as traces) and the last
AUDIT_KEEP actions of each model in the store (`audit:{name}`, newest first), which
`GET /api/models/{name}/rollout` shows. The action's own record is written first (its write
raises); its audit line follows, and an audit entry the store did not keep is logged as such.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import msgspec

from shared.domain.answers import ControlAction
from shared.errors import ControlStoreDown

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "AUDIT_KEEP",
    "Actor",
    "ControlAudit",
    "ControlStore",
    "MemoryControlStore",
    "RedisControlStore",
    "audit_key",
]

T = TypeVar("T")
RECENT_S = 10.0  # a failure this recent shows in readiness, unless a call succeeded since
AUDIT_KEEP = 50  # control actions kept per model
audit_log = logging.getLogger("shared.audit")
Verb = Literal["pin", "unpin", "shadow", "unshadow", "canary", "abort", "promote"]


class ControlStore(Protocol):
    """Small records by key, without expiry; every failure raises `ControlStoreDown`."""

    async def read(self, keys: Sequence[str]) -> list[bytes | None]: ...

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None: ...

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        """Store `value` unless `key` holds one; whether it was stored."""
        ...

    async def append(self, key: str, value: bytes, keep: int) -> None:
        """Put `value` first in the list at `key`, keeping its newest `keep` entries."""
        ...

    async def recent(self, key: str, count: int) -> list[bytes]:
        """The newest `count` entries of the list at `key`, newest first."""
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

    def __init__(self, client: Redis, *, prefix: str = "", timeout_s: float = 1.0, where: str = "REDIS_URL") -> None:
        self._client = client
        self._prefix = prefix
        self._timeout = timeout_s
        self._health = _Health()
        self._where = where  # how a failure names the server: `host:port (REDIS_URL)`, never its password

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "", use_entra: bool = False, timeout_s: float = 1.0
    ) -> RedisControlStore:
        """A store over `url`; `use_entra` authenticates with a Microsoft Entra token (managed identity)."""
        from shared.stores.cache.redis_tier import redis_client

        client = redis_client(url, timeout_s=timeout_s, use_entra=use_entra)
        return cls(client, prefix=prefix, timeout_s=timeout_s, where=_address(url))

    async def read(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        values = await self._call(self._client.mget([self._prefix + k for k in keys]))
        return [v.encode() if isinstance(v, str) else v for v in values]  # the client never decodes

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        px = max(1, int(ttl_s * 1000)) if ttl_s else None
        await self._call(self._client.set(self._prefix + key, value, px=px))

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        return bool(await self._call(self._client.set(self._prefix + key, value, nx=True)))

    async def append(self, key: str, value: bytes, keep: int) -> None:
        pipe = self._client.pipeline(transaction=True)  # MULTI: the list never grows past `keep`
        pipe.lpush(self._prefix + key, value)
        pipe.ltrim(self._prefix + key, 0, keep - 1)
        await self._call(pipe.execute())

    async def recent(self, key: str, count: int) -> list[bytes]:
        values = await self._call(self._client.lrange(self._prefix + key, 0, count - 1))
        return [v.encode() if isinstance(v, str) else v for v in values]

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
            if isinstance(exc, TimeoutError):  # a write may have landed all the same
                detail = f"Redis at {self._where} did not answer in time (TimeoutError): the fleet's record may or may not have changed"
            else:
                detail = f"Redis at {self._where} failed ({type(exc).__name__}): the fleet's record was not changed"
            raise ControlStoreDown(f'{detail}; is Redis running there? (`redis-cli -u "$REDIS_URL" ping`)') from exc
        self._health.succeeded_at = time.monotonic()
        return result

    async def aclose(self) -> None:
        await self._client.aclose()


def _address(url: str) -> str:
    """`host:port (REDIS_URL)` of a Redis URL, its password left out (a unix socket: its path)."""
    parts = urlsplit(url)
    where = parts.path if parts.scheme == "unix" else f"{parts.hostname}:{parts.port or 6379}"
    return f"{where} (REDIS_URL)"


def _honour_cancel() -> None:
    """Raise a cancellation of this task that redis-py swallowed.

    NOTE: CPython 3.11's `asyncio.wait_for` returns the result of an awaitable that completes in
    the same loop turn as a cancel, and drops the cancel (gh-86296; fixed in 3.12); redis-py sends
    each command through it when a socket timeout is set. The fleet's watches (pins, shadows,
    canaries) read here in a loop: one cancelled mid-read ran on after shutdown stopped waiting for
    it (reproduced: about 1 cancel in 10 landing on a read; tests/fleet/test_sync.py).
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class MemoryControlStore:
    """Records in this process; `down=True` fails every call."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lists: dict[str, list[bytes]] = {}
        self.down = False
        self._health = _Health()

    async def read(self, keys: Sequence[str]) -> list[bytes | None]:
        self._check()
        return [self.data.get(k) for k in keys]

    async def write(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._check()
        self.data[key] = value  # no expiry here: a fake for tests of other code

    async def write_if_absent(self, key: str, value: bytes) -> bool:
        self._check()
        if key in self.data:
            return False
        self.data[key] = value
        return True

    async def append(self, key: str, value: bytes, keep: int) -> None:
        self._check()
        self.lists[key] = [value, *self.lists.get(key, [])][:keep]

    async def recent(self, key: str, count: int) -> list[bytes]:
        self._check()
        return self.lists.get(key, [])[:count]

    def problem(self) -> str | None:
        return self._health.problem()

    def _check(self) -> None:
        if self.down:
            self._health.failed_at, self._health.failure = time.monotonic(), "down"
            raise ControlStoreDown("redis did not keep the fleet's record (down): nothing was changed; try again")
        self._health.succeeded_at = time.monotonic()

    async def aclose(self) -> None:
        self.data.clear()
        self.lists.clear()


# -- the audit of control actions ---------------------------------------------------------------

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a control call, and why (from the call's body); both cut to 200 printable characters."""

    who: str
    reason: str = ""

    def __post_init__(self) -> None:
        # NOTE: `who` may come from a header: no control character may forge a line of the audit stream
        object.__setattr__(self, "who", _UNPRINTABLE.sub("?", self.who)[:200] or "unknown")
        object.__setattr__(self, "reason", _UNPRINTABLE.sub("?", self.reason)[:200])


def audit_key(name: str) -> str:
    return f"audit:{name}"


class ControlAudit:
    """Who did what to which model, when and why: the audit stream, and the last actions in `store`
    (in this process when there is no store)."""

    def __init__(self, store: ControlStore | None, *, keep: int = AUDIT_KEEP) -> None:
        self._store = store
        self._keep = keep
        self._here: defaultdict[str, deque[bytes]] = defaultdict(lambda: deque(maxlen=keep))

    async def record(
        self,
        by: Actor | None,
        action: Verb,
        model: str,
        *,
        version: str | None = None,
        weight: float | None = None,
    ) -> ControlAction:
        """Record an action that was done (its own record already kept); return it."""
        actor = by or Actor("internal")
        entry = ControlAction(time.time(), actor.who, action, model, version, weight, actor.reason)
        audit_log.info(
            "control %s on %s by %s (version %s, weight %s): %s",
            action, model, actor.who, version, weight, actor.reason or "no reason given",
            extra={"control_action": action, "model": model, "who": actor.who, "version": version,
                   "weight": weight, "reason": actor.reason},
        )  # fmt: skip
        encoded = msgspec.json.encode(entry)
        if self._store is None:
            self._here[model].appendleft(encoded)
            return entry
        try:
            await self._store.append(audit_key(model), encoded, self._keep)
        except ControlStoreDown as exc:  # the action is done and on the stream; only the list misses it
            audit_log.error("control %s on %s by %s: not kept in the store: %s", action, model, actor.who, exc.detail)
        return entry

    async def recent(self, model: str, count: int = 10) -> list[ControlAction]:
        """The last `count` actions on `model`, newest first."""
        if self._store is None:
            raw = list(self._here[model])[:count]
        else:
            raw = await self._store.recent(audit_key(model), count)
        return [msgspec.json.decode(r, type=ControlAction) for r in raw]
