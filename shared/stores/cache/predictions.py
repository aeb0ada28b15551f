"""The prediction cache, batch-shaped: L1 in-process TTL-LRU over L2 Redis.

Keys are model name + version + the canonical float32 feature row, so a new
version never serves an old prediction. The micro-batch asks L2 once per batch
(one MGET for all its misses) and writes its new scores back in the background;
values are 8-byte doubles stored raw behind the codec's marker byte. Whether a
model's predictions go through Redis at all is `pays()`: a round-trip must cost
less than the model run it saves.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from shared.domain.answers import CacheStats
from shared.policies import PredictionL2
from shared.stores.cache import codec
from shared.stores.cache.l1 import TtlLru
from shared.stores.cache.tier import L2Tier
from shared.stores.cache.tiered import Tier

__all__ = ["PredictionCache"]

_SCORE = struct.Struct("<d")


class PredictionCache:
    """Scores by (model, version, row)."""

    def __init__(
        self, *, l1_size: int, l1_ttl_s: float, l2: L2Tier | None, l2_ttl_s: float, l2_policy: PredictionL2 = "auto"
    ) -> None:
        self._l1: TtlLru[str, float] | None = TtlLru(l1_size, l1_ttl_s) if l1_size else None
        self._l2 = l2
        if l2_ttl_s <= 0:
            raise ValueError("predictions in the shared tier need a TTL: only keys with one may be evicted")
        self._l2_ttl = l2_ttl_s
        self._policy = l2_policy
        self.stats = CacheStats()

    def pays(self, inference_s: float | None) -> bool:
        """Whether Redis should serve this model's predictions now.

        A cache must cost less than the work it saves: under `auto`, Redis is used while
        its measured round-trip is shorter than the model's measured batch run (a tiny
        model recomputes faster than Redis answers; a large one saves real time). Until
        both are measured, Redis is used.
        """
        if self._l2 is None or self._policy == "never":
            return False
        if self._policy == "always" or inference_s is None or self._l2.rtt_s is None:
            return True
        return inference_s > self._l2.rtt_s

    @staticmethod
    def key(name: str, version: str, row: bytes) -> str:
        return f"pred:{name}:{version}:{hashlib.blake2b(row, digest_size=16).hexdigest()}"

    def get_l1(self, key: str) -> float | None:
        """The score if this process has it (counted as an L1 hit)."""
        if self._l1 is None:
            return None
        score = self._l1.get(key)
        if score is not None:
            self.stats.l1_hits += 1
        return score

    async def get_l2(self, keys: Sequence[str]) -> list[float | None]:
        """Scores from Redis for `keys` in one round-trip; any failure reads as misses."""
        if self._l2 is None or not keys:
            self.stats.misses += len(keys)
            return [None] * len(keys)
        found: list[float | None] = []
        for value in await self._l2.mget(keys):
            payload = codec.decode(value)
            score = _SCORE.unpack(payload)[0] if payload is not None and len(payload) == _SCORE.size else None
            found.append(score)
            if score is None:
                self.stats.misses += 1
            else:
                self.stats.l2_hits += 1
                self.remember(keys[len(found) - 1], score)
        return found

    async def lookup(
        self, keys: Sequence[str], *, use_l2: bool, l1_checked: bool = False
    ) -> dict[str, tuple[float, Tier]]:
        """What the caches hold for the keys of one batch: L1, then one MGET for the rest.

        Every key found in neither tier counts as one miss (it goes to the model).
        NOTE: L1 is read again here although `get_l1` answered the request path: a row
        that the previous batch scored while this one waited must not run twice. Rows that
        did not wait (a batch request's, `l1_checked`) skip that second read.
        """
        known: dict[str, tuple[float, Tier]] = {}
        l1 = None if l1_checked else self._l1
        if l1 is not None:
            for key in keys:
                score = l1.get(key)
                if score is not None:
                    known[key] = (score, "l1")
            self.stats.l1_hits += len(known)
        wanted = list(dict.fromkeys(k for k in keys if k not in known))
        if use_l2 and wanted:
            for key, score in zip(wanted, await self.get_l2(wanted), strict=True):
                if score is not None:
                    known[key] = (score, "l2")
        else:
            self.stats.misses += len(wanted)
        return known

    def remember(self, key: str, score: float) -> None:
        if self._l1 is not None:
            self._l1[key] = score

    def store(self, items: Sequence[tuple[str, float]], *, l2: bool = True) -> None:
        """Keep new scores in L1 now and, when `l2`, in Redis in the background."""
        for key, score in items:
            self.remember(key, score)
        if self._l2 is not None and l2 and items:
            self._l2.put_many([(key, codec.encode(_SCORE.pack(score))) for key, score in items], self._l2_ttl)
