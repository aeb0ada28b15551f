"""The seam between the caches and their shared tier (L2), and an in-memory fake of it.

`RedisTier` is the real L2. `MemoryTier` behaves the same from the caller's side (byte
values, misses as `None`, background writes, an optional outage) without a server: it
is for tests of *other* code. Redis itself is always tested against a real Redis.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from shared.domain.answers import TierStats

__all__ = ["L2Tier", "MemoryTier", "ewma"]


def ewma(previous: float | None, sample: float, alpha: float = 0.1) -> float:
    """An exponentially weighted moving average (the first sample starts it)."""
    return sample if previous is None else previous + alpha * (sample - previous)


class L2Tier(Protocol):
    """A shared byte store where any failure is a miss, never an error."""

    stats: TierStats
    rtt_s: float | None

    @property
    def available(self) -> bool: ...

    async def get(self, key: str) -> bytes | None: ...

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]: ...

    def put(self, key: str, value: bytes, ttl_s: float | None) -> None: ...

    def put_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float | None) -> None: ...

    def problem(self) -> str | None:
        """Why the tier serves less than it should now (readiness shows it), or None."""
        ...

    async def delete(self, key: str) -> None: ...

    async def flush(self) -> None: ...

    async def aclose(self) -> None: ...


class MemoryTier:
    """An in-process L2 with expiry; `down=True` makes every call a miss, as an outage would."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bytes, float | None]] = {}
        self.down = False
        self.rtt_s: float | None = 0.0
        self.stats = TierStats()

    @property
    def available(self) -> bool:
        return not self.down

    async def get(self, key: str) -> bytes | None:
        return (await self.mget([key]))[0]

    async def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        self.stats.reads += len(keys)
        if self.down:
            self.stats.skipped += len(keys)
            return [None] * len(keys)
        self.stats.round_trips += 1
        now = time.monotonic()
        found: list[bytes | None] = []
        for key in keys:
            value, expires = self._data.get(key, (None, None))
            found.append(value if expires is None or expires > now else None)
        return found

    def put(self, key: str, value: bytes, ttl_s: float | None) -> None:
        self.put_many([(key, value)], ttl_s)

    def put_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float | None) -> None:
        if self.down:
            self.stats.skipped += len(items)
            return
        expires = time.monotonic() + ttl_s if ttl_s else None
        self._data.update((key, (value, expires)) for key, value in items)
        self.stats.writes += len(items)

    def problem(self) -> str | None:
        return "memory tier: down" if self.down else None

    async def delete(self, key: str) -> None:
        self._data.pop(key, None)

    async def flush(self) -> None:
        return None

    async def aclose(self) -> None:
        self._data.clear()
