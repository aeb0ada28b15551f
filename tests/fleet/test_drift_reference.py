"""One drift reference per fleet: the first replica to fill a version's publishes it in Redis, the others adopt it.

Replicas here are DriftMonitors on one real Redis (a key prefix of the test's own), fed
different samples of the same population, so that each one's own reference would differ.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pytest
from redis.asyncio import Redis

from shared.fleet.drift import DriftMonitor
from shared.fleet.keys import SharedReference, reference_key
from shared.stores.control import RedisControlStore
from tests.conftest import closed_port
from tests.fleet.test_drift import COLUMNS, POLICY, RNG_SEED, only_view, population

Replica = Callable[..., DriftMonitor]


@pytest.fixture
def replica(redis_url: str, redis_prefix: str, redis_client: Any, closing: Callable[[Any], Any]) -> Replica:
    """`replica(name)`: a DriftMonitor on the test's Redis namespace (its store closed after the test)."""

    def make(name: str, url: str = redis_url) -> DriftMonitor:
        store = closing(RedisControlStore(Redis.from_url(url), prefix=redis_prefix, timeout_s=0.5))
        return DriftMonitor(POLICY, store, replica=name)

    return make


async def test_two_replicas_end_up_measuring_against_the_identical_reference(model: str, replica: Replica) -> None:
    a, b = replica("a"), replica("b")
    a.observe(population(model, 1000, np.random.default_rng(1)))
    b.observe(population(model, 1000, np.random.default_rng(2)))
    own_a, own_b = a.reference(model, "1"), b.reference(model, "1")
    assert own_a is not None and own_b is not None and own_a.cuts != own_b.cuts  # each filled its own

    await a.exchange()  # NOTE: the first to publish wins
    await b.exchange()  # its set-if-absent refused: it reads a's and adopts it
    assert a.reference(model, "1") == b.reference(model, "1") == own_a
    assert only_view(a, model).reference == only_view(b, model).reference == "fleet"
    assert only_view(b, model).psi == {}  # NOTE: its window was in its own bins: it starts again

    rng = np.random.default_rng(RNG_SEED)
    for monitor in (a, b):
        monitor.observe(population(model, 1000, rng, shift={3: 1.0}))
        psi = only_view(monitor, model).psi
        assert psi["user_f3"] > 0.5, psi
        assert max(v for n, v in psi.items() if n != "user_f3") < 0.08, psi


async def test_a_replica_that_starts_later_adopts_the_published_reference_before_building_its_own(
    model: str, replica: Replica
) -> None:
    first = replica("first")
    first.observe(population(model, 1000, np.random.default_rng(1)))
    await first.exchange()

    later = replica("later")  # a restart, or a replica scaled out later
    job = asyncio.get_running_loop().create_task(later.run())
    try:
        later.observe(population(model, 300, np.random.default_rng(3)))  # NOTE: its own would need 1000
        for _ in range(200):
            await asyncio.sleep(0.01)
            if only_view(later, model).reference == "fleet":
                break
    finally:
        job.cancel()
    view = only_view(later, model)
    assert view.reference == "fleet" and view.reference_events == 1000
    assert later.reference(model, "1") == first.reference(model, "1")
    assert view.psi and max(view.psi.values()) < 0.2, view.psi  # its 300 rows became its window


async def test_with_the_store_down_a_replica_keeps_its_own_reference_and_says_so(
    model: str, replica: Replica, caplog: pytest.LogCaptureFixture
) -> None:
    down = replica("down", url=f"redis://127.0.0.1:{closed_port()}/0")
    rng = np.random.default_rng(RNG_SEED)
    down.observe(population(model, 1000, rng))
    with caplog.at_level(logging.WARNING, logger="shared.fleet.drift"):
        await down.exchange()
    assert only_view(down, model).reference == "local: control store down"
    assert "keeps this replica's own reference" in caplog.text

    down.observe(population(model, 1000, rng, shift={3: 1.0}))  # drift goes on, on its own reference
    assert only_view(down, model).psi["user_f3"] > 0.5


async def test_a_published_reference_that_does_not_describe_the_version_is_not_adopted(
    model: str, replica: Replica, redis_client: Any, redis_prefix: str
) -> None:
    first = replica("first")
    first.observe(population(model, 1000, np.random.default_rng(1)))
    await first.exchange()
    published = first.reference(model, "1")
    assert published is not None
    key = redis_prefix + reference_key(model, "1", "fp")
    broken = msgspec.structs.replace(published, counts=published.counts[:-1])  # mutation: a column's counts lost
    await redis_client.set(key, msgspec.json.encode(broken))

    later = replica("later")
    later.observe(population(model, 1000, np.random.default_rng(2)))
    await later.exchange()
    view = only_view(later, model)
    assert view.reference.startswith("local: the fleet's reference is unreadable"), view.reference
    assert later.reference(model, "1") != published and view.psi  # its own, measured

    await redis_client.set(key, b"not json")
    again = replica("again")
    again.observe(population(model, 10, np.random.default_rng(3)))
    await again.exchange()
    assert only_view(again, model).reference.startswith("local: the fleet's reference is unreadable")


def test_a_shared_reference_round_trips_exactly(model: str) -> None:
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, np.random.default_rng(1)))
    shared = monitor.reference(model, "1")
    assert shared is not None and shared.columns == [*COLUMNS, "score"]
    assert msgspec.json.decode(msgspec.json.encode(shared), type=SharedReference) == shared
    assert len(msgspec.json.encode(shared)) < 16_000  # a few KB at 25 features and 10 bins
