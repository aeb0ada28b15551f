"""User context: the online feature store.

One compact value per user under `user:{user_id}` (a JSON object of numbers,
codec-encoded: LZ4 past a few dozen bytes), so the users of a whole batch are one
MGET. Redis is the source of truth when configured; the embedded default reads a
JSON file shipped in the repo. A missing user is an empty context (every user
feature then takes its model default), never an error.

`ContextStore` is the seam the core reads through: this store, or `FeastStore`
(shared/features/feast.py) when FEATURE_STORE=feast.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeAlias

import orjson

from shared.domain.answers import FeatureStats
from shared.domain.events import PaymentEvent
from shared.domain.spec import ModelSpec
from shared.features.mapping import Context
from shared.stores.cache import codec
from shared.stores.cache.l1 import TtlLru
from shared.stores.cache.tier import L2Tier
from shared.stores.cache.tiered import Tier, TieredCache

__all__ = [
    "SCHEMA_KEY",
    "ContextStore",
    "FeatureStore",
    "UserFeatures",
    "encode_user",
    "load_feature_file",
    "seed_redis",
    "user_key",
]

log = logging.getLogger(__name__)
UserFeatures: TypeAlias = dict[str, float]


SCHEMA_KEY = "features:schema"


def user_key(user_id: str) -> str:
    return f"user:{user_id}"


def encode_user(features: Mapping[str, float]) -> bytes:
    return codec.encode(orjson.dumps(dict(features)))


def _decode_user(payload: bytes) -> UserFeatures | None:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def load_feature_file(path: str | Path) -> dict[str, UserFeatures]:
    """`{user_id: {feature: number}}` from a JSON file."""
    data = orjson.loads(Path(path).read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of users")
    return data


class ContextStore(Protocol):
    """Where the core reads each event's user context for a model (by the model's column names)."""

    source: str

    async def catalogue(self) -> frozenset[str] | None: ...

    def stats(self) -> FeatureStats: ...

    async def context(self, spec: ModelSpec, event: PaymentEvent) -> Context | None: ...

    async def contexts(self, spec: ModelSpec, events: Sequence[PaymentEvent]) -> list[Context | None]: ...

    def problem(self) -> str | None:
        """Why the store serves less than it should now (readiness lists it), or None."""
        ...

    async def aclose(self) -> None: ...


class FeatureStore:
    """Reads user context through L1 (short TTL) and Redis, or from the demo file."""

    def __init__(
        self, *, redis: L2Tier | None, fallback: Mapping[str, UserFeatures] | None, l1_size: int, l1_ttl_s: float
    ) -> None:
        self._fallback = fallback or {}
        self.cache: TieredCache[UserFeatures] = TieredCache(
            "features",
            l1=TtlLru(l1_size, l1_ttl_s) if l1_size else None,
            l2=redis,
            l2_ttl_s=1.0,
            dump=lambda v: orjson.dumps(v),
            load=_decode_user,
            write_back=False,
        )
        self.source = "redis" if redis is not None else "file"
        self._redis = redis
        self._file_names = frozenset(name for user in self._fallback.values() for name in user) if fallback else None

    async def catalogue(self) -> frozenset[str] | None:
        """The user feature names the store serves, or None when it cannot say.

        From Redis: the JSON list under `features:schema`, which the feature pipeline
        (here `seed_redis`) publishes with the features; from the demo file: every name in it.
        """
        if self._redis is None:
            return self._file_names
        payload = codec.decode(await self._redis.get(SCHEMA_KEY))
        try:
            names = orjson.loads(payload) if payload is not None else None
        except orjson.JSONDecodeError:
            names = None
        return frozenset(map(str, names)) if isinstance(names, list) else None

    def stats(self) -> FeatureStats:
        counted = self.cache.stats
        return FeatureStats(counted.l1_hits, counted.l2_hits, counted.misses)

    async def get(self, user_id: str) -> tuple[UserFeatures, Tier | None]:
        """The user's features ({} when unknown) and the tier that served them."""
        return await self.cache.get_or_compute(user_key(user_id), lambda: self._from_fallback(user_id))

    async def get_many(self, user_ids: Iterable[str]) -> dict[str, UserFeatures]:
        """Features of several users: this process's copies at once, the rest read concurrently."""
        found: dict[str, UserFeatures] = {}
        missing: list[str] = []
        for user_id in set(user_ids):
            features = self.cache.peek(user_key(user_id))
            if features is None:
                missing.append(user_id)
            else:
                found[user_id] = features
        if missing:
            read = await asyncio.gather(*(self.get(user_id) for user_id in missing))
            found.update((user_id, features) for user_id, (features, _) in zip(missing, read, strict=True))
        return found

    async def context(self, spec: ModelSpec, event: PaymentEvent) -> Context | None:
        """The event's user's features (the same for every model)."""
        return (await self.get(event.user_id))[0]

    async def contexts(self, spec: ModelSpec, events: Sequence[PaymentEvent]) -> list[Context | None]:
        found = await self.get_many(e.user_id for e in events)
        return [found.get(e.user_id) for e in events]

    def problem(self) -> str | None:
        return None  # its Redis is the cache tier, which reports itself

    async def aclose(self) -> None:
        return None  # its Redis is the cache tier, which the core closes

    async def _from_fallback(self, user_id: str) -> UserFeatures:
        return dict(self._fallback.get(user_id, {}))


async def seed_redis(
    url: str, users: Mapping[str, Mapping[str, float]], *, prefix: str = "", ttl_s: int | None = None
) -> int:
    """Write every user's features to Redis in pipelined chunks; returns the count."""
    from redis.asyncio import Redis  # a tool's path (scripts/seed_features.py), not the server's

    client = Redis.from_url(url)
    try:
        items = list(users.items())
        for start in range(0, len(items), 1000):
            async with client.pipeline(transaction=False) as pipe:
                for user_id, features in items[start : start + 1000]:
                    pipe.set(prefix + user_key(user_id), encode_user(features), ex=ttl_s)
                await pipe.execute()
        names = sorted({name for features in users.values() for name in features})
        await client.set(prefix + SCHEMA_KEY, codec.encode(orjson.dumps(names)))
        return len(items)
    finally:
        await client.aclose()
