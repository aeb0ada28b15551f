"""The in-process tier (L1): a TTL LRU whose hit is one dict lookup and one clock read.

The rules of `cachetools.TTLCache` (which this replaces on the score path, where its hit cost
~1.5 µs of Python calls): a value lives `ttl_s` from when it was stored; a write first drops
every expired value, then, while the cache is full, the least recently used (read or written);
reading a key makes it the most recently used, expired or not. One TTL for all keys, so the
order values were stored in is the order they expire in.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["TtlLru"]

K = TypeVar("K")
V = TypeVar("V")


class TtlLru(Generic[K, V]):
    """At most `maxsize` values, each for `ttl_s` seconds (of `timer`) after it was stored."""

    __slots__ = ("_entries", "_expiry", "_timer", "maxsize", "ttl_s")

    def __init__(self, maxsize: int, ttl_s: float, timer: Callable[[], float] = time.monotonic) -> None:
        if maxsize < 1:
            raise ValueError(f"an L1 holds at least one value, got maxsize={maxsize}")
        self.maxsize, self.ttl_s, self._timer = maxsize, ttl_s, timer
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()  # least recently used first
        self._expiry: OrderedDict[K, float] = OrderedDict()  # soonest to expire first

    def __len__(self) -> int:
        self.expire(self._timer())
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The live value of `key`, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0] if self._timer() < entry[1] else None

    def __setitem__(self, key: K, value: V) -> None:
        now = self._timer()
        self.expire(now)
        entries, expiry = self._entries, self._expiry
        if key in entries:
            entries.move_to_end(key)
            expiry.move_to_end(key)
        else:
            while len(entries) >= self.maxsize:
                evicted, _ = entries.popitem(last=False)
                del expiry[evicted]
        entries[key] = (value, now + self.ttl_s)
        expiry[key] = now + self.ttl_s

    def expire(self, now: float) -> None:
        """Drop every value whose time is up at `now`."""
        expiry, entries = self._expiry, self._entries
        while expiry:
            key = next(iter(expiry))
            if now < expiry[key]:
                return
            del expiry[key], entries[key]
