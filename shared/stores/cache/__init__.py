"""Caching: L1 in-process TTL LRU over an L2 tier (Redis, LZ4 values).

l1            the in-process TTL LRU (a hit: one dict lookup)
tier          the seam to the shared tier (L2), and an in-memory fake of it
redis_tier    L2 on Redis, where a failure is a miss; the one Redis client builder
tiered        L1 then L2 then compute, single-flight on misses
predictions   the batch-shaped prediction cache
codec         the byte format of values in Redis
"""
