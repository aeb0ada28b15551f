"""Where reviews are kept, by event id, for `GET /api/reviews/{event_id}`.

A review that outlives its request (pending) finishes in the background and lands here.
Redis (when configured) makes it readable from any replica, through the store whose writes
raise (shared/stores/control.py): a record Redis did not keep is counted and readiness says so
(readable on this replica only), instead of the cache tier's silent miss. An in-process TTL
map keeps this replica's own reviews readable when Redis is absent or down. Every record
carries a TTL (REVIEW_TTL_S): under volatile-lru these are evictable, like the caches.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
from cachetools import TTLCache

from shared.domain.answers import ReviewRecord
from shared.errors import ControlStoreDown
from shared.stores.cache import codec
from shared.stores.control import ControlStore

__all__ = ["ReviewStore"]

LOCAL_RECORDS = 10_000
RECENT_S = 60.0  # readiness names records not kept this long


class ReviewStore:
    """Review records by event id (JSON in Redis)."""

    def __init__(self, store: ControlStore | None, ttl_s: float) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._local: TTLCache[str, ReviewRecord] = TTLCache(LOCAL_RECORDS, ttl_s)
        self._writes: set[asyncio.Task[None]] = set()
        self.unkept = 0  # records Redis did not keep (readable on this replica only)
        self._unkept_at = float("-inf")

    @staticmethod
    def _key(event_id: str) -> str:
        return f"review:{event_id}"

    def put(self, event_id: str, record: ReviewRecord) -> None:
        """Keep `record` (the caller never waits: Redis is written in the background)."""
        self._local[event_id] = record
        if self._store is not None:
            task = asyncio.get_running_loop().create_task(self._keep(event_id, record))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _keep(self, event_id: str, record: ReviewRecord) -> None:
        assert self._store is not None  # noqa: S101 narrows the type: `put` checked
        try:
            await self._store.write(self._key(event_id), codec.encode(msgspec.json.encode(record)), self._ttl_s)
        except ControlStoreDown:
            self.unkept += 1
            self._unkept_at = time.monotonic()

    async def get(self, event_id: str) -> ReviewRecord | None:
        """The record, or None; `ControlStoreDown` when only Redis could say and it does not answer.
        A record this replica holds is as new as any in Redis."""
        record = self._local.get(event_id)
        if record is not None or self._store is None:
            return record
        payload = codec.decode((await self._store.read([self._key(event_id)]))[0])
        if payload is None:
            return None
        try:
            return msgspec.json.decode(payload, type=ReviewRecord)
        except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec raises the latter for a bad string
            return None  # a corrupt record (or not a record) reads as absent, never as an error

    def problem(self) -> str | None:
        """Records Redis did not keep lately (readiness lists it), or None."""
        if time.monotonic() - self._unkept_at > RECENT_S:
            return None
        return f"reviews: {self.unkept} review records not kept in Redis since start: readable on this replica only"

    async def drain(self) -> None:
        """Wait for the writes in flight (at shutdown)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
