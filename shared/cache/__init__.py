"""Caching: L1 in-process TTL LRU (cachetools) over an L2 tier (Redis, LZ4 values).

Importing the package is light: `RedisTier` (and redis itself) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

if TYPE_CHECKING:
    from shared.cache.predictions import PredictionCache
    from shared.cache.redis_tier import RedisStats, RedisTier
    from shared.cache.singleflight import SingleFlight
    from shared.cache.tier import L2Tier, MemoryTier
    from shared.cache.tiered import Tier, TieredCache

__all__ = [
    "L2Tier",
    "MemoryTier",
    "PredictionCache",
    "RedisStats",
    "RedisTier",
    "SingleFlight",
    "Tier",
    "TieredCache",
]

_HOMES = {
    "Tier": "tiered",
    "TieredCache": "tiered",
    "L2Tier": "tier",
    "MemoryTier": "tier",
    "PredictionCache": "predictions",
    "RedisStats": "redis_tier",
    "RedisTier": "redis_tier",
    "SingleFlight": "singleflight",
}


__getattr__ = lazy_exports(__name__, _HOMES)  # NOTE: PEP 562: a submodule loads when its name is first used
