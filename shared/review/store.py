"""Where reviews are kept, by event id, for `GET /api/reviews/{event_id}`.

A review that outlives its request (pending) finishes in the background and lands here.
Redis (when configured) makes it readable from any replica; an in-process TTL map keeps
this replica's own reviews readable when Redis is absent or down. Every record carries
a TTL (REVIEW_TTL_S): under volatile-lru these are evictable, like the caches.
"""

from __future__ import annotations

import orjson
from cachetools import TTLCache

from shared.cache import codec
from shared.cache.tier import L2Tier

__all__ = ["ReviewStore"]

LOCAL_RECORDS = 10_000


class ReviewStore:
    """Review records (JSON objects) by event id."""

    def __init__(self, l2: L2Tier | None, ttl_s: float) -> None:
        self._l2 = l2
        self._ttl_s = ttl_s
        self._local: TTLCache[str, dict[str, object]] = TTLCache(LOCAL_RECORDS, ttl_s)

    @staticmethod
    def _key(event_id: str) -> str:
        return f"review:{event_id}"

    def put(self, event_id: str, record: dict[str, object]) -> None:
        """Keep `record` (the caller never waits: Redis is written in the background)."""
        self._local[event_id] = record
        if self._l2 is not None:
            self._l2.put(self._key(event_id), codec.encode(orjson.dumps(record)), self._ttl_s)

    async def get(self, event_id: str) -> dict[str, object] | None:
        """The record, or None. A record this replica holds is as new as any in Redis."""
        record = self._local.get(event_id)
        if record is not None or self._l2 is None:
            return record
        payload = codec.decode(await self._l2.get(self._key(event_id)))
        if payload is None:
            return None
        try:
            found = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return None  # NOTE: a corrupt record reads as absent, never as an error
        return found if isinstance(found, dict) else None
