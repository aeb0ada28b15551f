"""The in-process tier keeps `cachetools.TTLCache`'s rules: the same operations, the same answers."""

from __future__ import annotations

import random

import pytest
from cachetools import TTLCache

from shared.stores.cache.l1 import TtlLru


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_value_lives_its_ttl_from_when_it_was_stored() -> None:
    clock = Clock()
    cache: TtlLru[str, float] = TtlLru(10, 5.0, clock)
    cache["a"] = 0.5
    clock.now += 4.9
    assert cache.get("a") == 0.5
    clock.now += 0.1
    assert cache.get("a") is None
    assert len(cache) == 0


def test_a_full_cache_drops_the_expired_then_the_least_recently_used() -> None:
    clock = Clock()
    cache: TtlLru[str, int] = TtlLru(3, 10.0, clock)
    for key in "abc":
        cache[key] = ord(key)
        clock.now += 1
    assert cache.get("a") == ord("a")  # NOTE: "b" is now the least recently used
    cache["d"] = 4
    assert [cache.get(k) for k in "abcd"] == [ord("a"), None, ord("c"), 4]


def test_it_answers_as_cachetools_ttlcache_does_over_random_operations() -> None:
    clock = Clock()
    ours: TtlLru[int, int] = TtlLru(8, 3.0, clock)
    theirs: TTLCache[int, int] = TTLCache(8, 3.0, timer=clock)
    rng = random.Random(7)  # noqa: S311 a reproducible sequence of operations, not a secret
    for step in range(5000):
        key = rng.randrange(20)
        if rng.random() < 0.5:
            ours[key] = theirs[key] = step
        else:
            assert ours.get(key) == theirs.get(key), step
        clock.now += rng.choice((0.0, 0.1, 0.5))
        if step % 50 == 0:
            assert len(ours) == len(theirs)


def test_an_empty_l1_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TtlLru(0, 1.0)
