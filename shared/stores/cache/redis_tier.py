"""L2: Redis, where a failure is a miss and never an error.

Reads of concurrent requests coalesce into one MGET (a `Batcher` with no window:
reads queue while an MGET is in flight and go together in the next one). Writes are
fire-and-forget, buffered for `write_delay_s` and sent in one round-trip per flush
(an MSET when nothing pending needs an expiry, else a pipeline). Every call runs under
a deadline; after a failure Redis is skipped for `backoff_s` so a dead or slow
server costs one timeout, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from shared.domain.answers import TierStats
from shared.policies import BatchPolicy
from shared.runtime.batching.batcher import Batcher
from shared.stores.cache.tier import ewma

__all__ = ["RedisTier", "ewma", "miss_client", "redis_client"]

log = logging.getLogger(__name__)
_FAILURES = (RedisError, OSError, TimeoutError)
RECENT_S = 10.0  # a failure this recent still shows in readiness, unless a read succeeded since


def redis_client(
    url: str, *, timeout_s: float, connect_timeout_s: float | None = None, use_entra: bool = False, **options: Any
) -> Redis:
    """A client over `url`, each socket operation bounded by `timeout_s`; `use_entra` authenticates
    with a Microsoft Entra token (managed identity). The tier, the control store and the result store
    each hold one, with the deadlines their contracts need."""
    credentials = None
    if use_entra:
        from redis_entraid.cred_provider import create_from_default_azure_credential

        credentials = create_from_default_azure_credential(("https://redis.azure.com/.default",))
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s if connect_timeout_s is None else connect_timeout_s,
        credential_provider=credentials,
        **options,
    )


def miss_client(url: str, *, timeout_s: float, use_entra: bool = False) -> Redis:
    """A client for reads where a failure is a miss (the cache tier, the feature stores): no
    retries, a short connect, and idle connections checked before use."""
    return redis_client(
        url,
        timeout_s=timeout_s,
        connect_timeout_s=max(timeout_s, 0.5),
        use_entra=use_entra,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


class RedisTier:
    """Byte values in Redis under `prefix`, read in coalesced MGETs, written in pipelines."""

    def __init__(
        self,
        client: Redis,
        *,
        timeout_s: float,
        prefix: str = "",
        backoff_s: float = 1.0,
        write_delay_s: float = 0.005,
    ) -> None:
        self._client = client
        self._write_delay = write_delay_s
        self._timeout = timeout_s
        self._prefix = prefix
        self._backoff = backoff_s
        self._down_until = 0.0
        self._failed_at: float | None = None
        self._answered_at = 0.0  # the last read answered in time: a recovery clears the failure at once
        self._failure = ""
        self._reader: Batcher[str, bytes | None] = Batcher(
            # reads are bounded upstream (MAX_INFLIGHT, the model batchers); this queue only coalesces
            self._mget,
            BatchPolicy(window_ms=0, max_size=512, max_queue=1 << 20),
            name="redis-mget",
        )
        self._writes: list[tuple[str, bytes, int | None]] = []
        self._flushing: asyncio.Task[None] | None = None
        self.rtt_s: float | None = None
        self.stats = TierStats()

    @classmethod
    def from_url(cls, url: str, *, timeout_s: float, prefix: str = "", use_entra: bool = False) -> RedisTier:
        """A tier over `url`; `use_entra` authenticates with a Microsoft Entra token (managed identity)."""
        client = miss_client(url, timeout_s=timeout_s, use_entra=use_entra)
        return cls(client, timeout_s=timeout_s, prefix=prefix)

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def get(self, key: str) -> bytes | None:
        """The stored bytes, or None on a miss, an eviction, a timeout or any Redis error."""
        self.stats.reads += 1
        if not self.available:
            self.stats.skipped += 1
            return None
        return (await self._reader.submit(self._prefix + key)).value

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """Many keys in one MGET now (for callers that already batch); failures read as misses."""
        self.stats.reads += len(keys)
        return await self._mget([self._prefix + key for key in keys])

    def put(self, key: str, value: bytes, ttl_s: float | None) -> None:
        """Store in the background; the caller never waits and never sees a failure."""
        self.put_many([(key, value)], ttl_s)

    def put_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float | None) -> None:
        """Store many in the background, with whatever else is pending, in one round-trip.

        `ttl_s=None` stores without expiry (Redis's allkeys-lru policy evicts the coldest):
        those go in one MSET, which costs the client far less than a SET per key.
        """
        if not self.available:
            self.stats.skipped += len(items)
            return
        ttl_ms = max(1, int(ttl_s * 1000)) if ttl_s else None
        self._writes.extend((self._prefix + key, value, ttl_ms) for key, value in items)
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def flush(self) -> None:
        """Wait until the writes queued so far have been sent (or dropped on failure)."""
        while self._flushing is not None and not self._flushing.done():
            await asyncio.gather(self._flushing, return_exceptions=True)

    async def aclose(self) -> None:
        self._write_delay = 0.0
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        await self._reader.drain()
        await self._client.aclose()

    async def _mget(self, keys: list[str]) -> list[bytes | None]:
        if not self.available:
            self.stats.skipped += len(keys)
            return [None] * len(keys)
        self.stats.round_trips += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout):
                values: list[bytes | None] = await self._client.mget(keys)  # type: ignore[assignment]
        except _FAILURES as exc:
            self._trip(exc)
            return [None] * len(keys)
        self._answered_at = time.monotonic()
        self.rtt_s = ewma(self.rtt_s, time.perf_counter() - started)
        self.stats.rtt_ms = round(self.rtt_s * 1000, 3)
        return values

    async def _flush(self) -> None:
        # writes wait a few ms for company: one MSET carries many batches' scores (docs/benchmark.md)
        await asyncio.sleep(self._write_delay)
        while self._writes and self.available:
            writes, self._writes = self._writes, []
            self.stats.round_trips += 1
            try:
                async with asyncio.timeout(self._timeout * 4):
                    await self._send(writes)
                self.stats.writes += len(writes)
            except ResponseError as exc:  # the server answered (e.g. OOM): reads go on
                self.stats.errors += 1
                self.stats.refused += len(writes)
                log.warning("redis refused %d writes: %s", len(writes), str(exc).split(".")[0][:120])
            except _FAILURES as exc:
                self._trip(exc)
        self._writes.clear()

    async def _send(self, writes: list[tuple[str, bytes, int | None]]) -> None:
        """One round-trip: an MSET for keys without expiry, a pipelined SET PX for the others.

        NOTE: single-key SETs, not a script over many keys: Azure Managed Redis is clustered,
        and a script's keys must share a hash slot there.
        """
        plain = {key: value for key, value, ttl_ms in writes if ttl_ms is None}
        if len(plain) == len(writes):
            await self._client.mset(plain)
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for key, value, ttl_ms in writes:
                if ttl_ms is not None:
                    pipe.set(key, value, px=ttl_ms)
            if plain:
                pipe.mset(plain)
            await pipe.execute()

    async def delete(self, key: str) -> None:
        """Remove `key` now (a control record); a failure is logged, never raised."""
        try:
            async with asyncio.timeout(self._timeout * 4):
                await self._client.delete(self._prefix + key)
        except _FAILURES as exc:
            self._trip(exc)

    def problem(self) -> str | None:
        """Why this tier serves less than it should now (a failure in the last RECENT_S, and no
        read answered in time since), or None."""
        failed_at = self._failed_at
        if failed_at is None or self._answered_at > failed_at or time.monotonic() - failed_at > RECENT_S:
            return None
        return f"redis: {self._failure} {time.monotonic() - failed_at:.0f} s ago: user features take model defaults"

    def _trip(self, exc: BaseException) -> None:
        self._failed_at, self._failure = time.monotonic(), type(exc).__name__
        self.stats.errors += 1
        if self.available:
            log.warning("redis unavailable (%s); serving without it for %.1f s", type(exc).__name__, self._backoff)
        self._down_until = time.monotonic() + self._backoff
