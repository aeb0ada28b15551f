"""Results kept by payment `event_id`, so a redelivery republishes the first result byte for byte.

An id binds its content: each result is kept with the digest of the payment it answers
(`shared.domain.events.event_digest`), and the handler hands a kept result only to a message
carrying the same payment; the same id with other content is a conflict, never that result.

`RedisResultStore` is the real store (shared by every replica): `keep` is a SET NX with a
TTL per key, so when two replicas score the same payment the first write wins and the
other publishes the winner's bytes. Every key has a TTL (Redis runs volatile-lru, and the
TTL must outlast the queues' duplicate-detection window, see RESULT_TTL_S). Values are
codec-encoded (LZ4 when it pays) like the cache. Unlike the cache, a failure here is an
error (`ResultStoreDown`), never a miss: a miss would score and publish a second result.

`MemoryResultStore` is the in-process store (no Redis: one process, `make replay`) and
the fake for handler tests; `down=True` makes it fail as an outage would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from shared.errors import ResultStoreDown
from shared.stores.cache import codec

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["Kept", "MemoryResultStore", "RedisResultStore", "ResultStore"]

T = TypeVar("T")
KEY = "result:"  # under the deployment's REDIS_KEY_PREFIX
MARK = b"\x01"  # a kept value: MARK, the 16-byte digest, the result (a JSON result starts with `{`)
DIGEST_BYTES = 16


class Kept(NamedTuple):
    """A kept result and the digest of the payment it answers (None: a record from before digests,
    kept by an older release for at most RESULT_TTL_S; it answers no payment: its content cannot be
    vouched for, so the event is refused as a conflict, never answered with another payment's result)."""

    digest: bytes | None
    body: bytes

    def answers(self, digest: bytes) -> bool:
        """Whether this result answers the payment with `digest` (never for a record without one)."""
        return self.digest is not None and self.digest == digest

    def pack(self) -> bytes:
        return MARK + (self.digest or b"") + self.body

    @classmethod
    def unpack(cls, value: bytes) -> Kept:
        if value[:1] == MARK and len(value) > DIGEST_BYTES:
            return cls(value[1 : 1 + DIGEST_BYTES], value[1 + DIGEST_BYTES :])
        return cls(None, value)


class ResultStore(Protocol):
    """Results by event id, each with its payment's digest; a failure raises `ResultStoreDown`."""

    async def find(self, event_ids: Sequence[str]) -> list[Kept | None]:
        """The stored result of each id, or None where none is stored."""
        ...

    async def keep(self, items: Sequence[tuple[str, Kept]]) -> list[Kept]:
        """Store each result unless one is stored already; returns the result that is kept."""
        ...

    async def aclose(self) -> None: ...


class MemoryResultStore:
    """Results in this process, with expiry; `down=True` fails every call."""

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self.ttl_s = ttl_s
        self.down = False
        self._data: dict[str, tuple[Kept, float]] = {}

    async def find(self, event_ids: Sequence[str]) -> list[Kept | None]:
        self._check()
        now = time.monotonic()
        found: list[Kept | None] = []
        for event_id in event_ids:
            value, expires = self._data.get(event_id, (None, 0.0))
            found.append(value if expires > now else None)
        return found

    async def keep(self, items: Sequence[tuple[str, Kept]]) -> list[Kept]:
        self._check()
        now = time.monotonic()
        kept: list[Kept] = []
        for event_id, value in items:
            stored = self._data.get(event_id)
            if stored is None or stored[1] <= now:
                stored = self._data[event_id] = (value, now + self.ttl_s)
            kept.append(stored[0])
        return kept

    def _check(self) -> None:
        if self.down:
            raise ResultStoreDown("result store: down")

    async def aclose(self) -> None:
        self._data.clear()


class RedisResultStore:
    """Results in Redis under `prefix + "result:" + event_id`, each with a TTL."""

    def __init__(self, client: Redis, *, ttl_s: float, prefix: str = "", timeout_s: float = 2.0) -> None:
        self._client = client
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._prefix = prefix + KEY
        self._timeout = timeout_s

    @classmethod
    def from_url(
        cls, url: str, *, ttl_s: float, prefix: str = "", use_entra: bool = False, timeout_s: float = 2.0
    ) -> RedisResultStore:
        """A store over `url`; `use_entra` authenticates with a Microsoft Entra token (managed identity)."""
        from shared.stores.cache.redis_tier import redis_client

        client = redis_client(url, timeout_s=timeout_s, use_entra=use_entra)
        return cls(client, ttl_s=ttl_s, prefix=prefix, timeout_s=timeout_s)

    async def find(self, event_ids: Sequence[str]) -> list[Kept | None]:
        if not event_ids:
            return []
        values = await self._call(self._client.mget([self._prefix + e for e in event_ids]))
        return [_kept(v) for v in values]

    async def keep(self, items: Sequence[tuple[str, Kept]]) -> list[Kept]:
        """One pipeline of SET NX PX; where a key existed, one MGET reads the value that won.

        NOTE: single-key commands, not a script: Azure Managed Redis is clustered, and a
        script's keys must share a hash slot there.
        """
        if not items:
            return []
        keys = [self._prefix + event_id for event_id, _ in items]

        async def run() -> list[object]:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, (_, value) in zip(keys, items, strict=True):
                    pipe.set(key, codec.encode(value.pack()), nx=True, px=self._ttl_ms)
                return list(await pipe.execute())

        written = await self._call(run())
        kept = [value for _, value in items]
        lost = [i for i, ok in enumerate(written) if not ok]
        if lost:
            winners = await self._call(self._client.mget([keys[i] for i in lost]))
            for i, winner in zip(lost, winners, strict=True):
                decoded = _kept(winner)
                if decoded is not None:  # expired between the two calls: ours stands
                    kept[i] = decoded
        return kept

    async def _call(self, call: Awaitable[T]) -> T:
        from redis.exceptions import RedisError

        try:
            async with asyncio.timeout(self._timeout):
                return await call
        except (RedisError, OSError, TimeoutError) as exc:
            raise ResultStoreDown(f"result store: redis {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _kept(value: bytes | str | None) -> Kept | None:
    decoded = codec.decode(_as_bytes(value))
    return None if decoded is None else Kept.unpack(decoded)


def _as_bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value  # the client never decodes responses
