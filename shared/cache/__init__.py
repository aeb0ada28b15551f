"""Caching: L1 in-process TTL LRU (cachetools) over L2 Redis with LZ4 values."""

from shared.cache.predictions import PredictionCache
from shared.cache.redis_tier import RedisStats, RedisTier
from shared.cache.singleflight import SingleFlight
from shared.cache.tiered import CacheStats, Tier, TieredCache

__all__ = ["CacheStats", "PredictionCache", "RedisStats", "RedisTier", "SingleFlight", "Tier", "TieredCache"]
