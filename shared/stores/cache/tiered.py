"""The tiered cache: L1 in-process LRU with TTL, then L2 Redis, then compute.

A miss in every tier computes once per key however many requests ask at the same
time (single-flight) and fills both tiers; L2 is written in the background.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, Literal, TypeVar

from shared.domain.answers import CacheStats
from shared.stores.cache import codec
from shared.stores.cache.l1 import TtlLru
from shared.stores.cache.singleflight import SingleFlight
from shared.stores.cache.tier import L2Tier

__all__ = ["Tier", "TieredCache"]

V = TypeVar("V")
Tier = Literal["l1", "l2"]


class TieredCache(Generic[V]):
    """Values of one kind (`name`), with `dump`/`load` to and from bytes for L2.

    `write_back=False` makes L2 the source of truth that this cache only reads
    (the online feature store, written by the feature pipeline).
    """

    def __init__(
        self,
        name: str,
        *,
        l1: TtlLru[str, V] | None,
        l2: L2Tier | None,
        l2_ttl_s: float,
        dump: Callable[[V], bytes],
        load: Callable[[bytes], V | None],
        compress_min_bytes: int = 64,
        write_back: bool = True,
    ) -> None:
        self.name = name
        self._l1 = l1
        self._l2 = l2
        self._l2_ttl = l2_ttl_s
        self._dump = dump
        self._load = load
        self._compress_min = compress_min_bytes
        self._write_back = write_back
        self._flights: SingleFlight[str, tuple[V, Tier | None]] = SingleFlight()
        self.stats = CacheStats()

    def peek(self, key: str) -> V | None:
        """The L1 value (a hit, counted), or None: no await, no Redis."""
        if self._l1 is not None:
            value = self._l1.get(key)
            if value is not None:
                self.stats.l1_hits += 1
                return value
        return None

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[V]]) -> tuple[V, Tier | None]:
        """The value and the tier that had it (None: computed now)."""
        if self._l1 is not None:
            value = self._l1.get(key)
            if value is not None:
                self.stats.l1_hits += 1
                return value, "l1"
        return await self._flights.do(key, lambda: self._fill(key, compute))

    async def _fill(self, key: str, compute: Callable[[], Awaitable[V]]) -> tuple[V, Tier | None]:
        l2_answered = True
        if self._l2 is not None:
            payload = codec.decode(await self._l2.get(key))
            value = self._load(payload) if payload is not None else None
            if value is not None:
                self.stats.l2_hits += 1
                self._remember(key, value)
                return value, "l2"
            l2_answered = self._l2.available
        self.stats.misses += 1
        value = await compute()
        if l2_answered:  # NOTE: a stand-in computed while Redis failed must not outlive the failure
            self._remember(key, value)
        if self._l2 is not None and self._write_back:
            self._l2.put(key, codec.encode(self._dump(value), compress_min_bytes=self._compress_min), self._l2_ttl)
        return value, None

    def _remember(self, key: str, value: V) -> None:
        if self._l1 is not None:
            self._l1[key] = value
