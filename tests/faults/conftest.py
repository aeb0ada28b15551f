"""The fault matrix's fixtures: servers of its own (Redis, Azurite), the LLM stand-in, replicas, a queue."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from shared.adapters.queue.publisher import MemoryPublisher, Publisher
from shared.core.service import ScoringService
from shared.features.store import seed_redis
from shared.settings import CachePolicy, Settings
from tests.faults.rig import FEATURES, Queue, Replica
from tests.faults.servers import AzuriteServer, RedisServer
from tests.onnx_models import make_model
from tests.review.conftest import llm, reviewing

__all__ = ["llm", "reviewing"]  # NOTE: the LLM stand-in's fixtures, shared with tests/review

# Every score reads its user's features from Redis (no copy kept in process), so a fault shows at
# once; a round-trip budget a noisy 2-core machine keeps when healthy (production's is 50 ms).
CACHE = CachePolicy(l1_size=1000, features_l1_size=0, redis_timeout_ms=250)


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    """`fraud/1`, a tiny model whose score follows the user features (the shared one saturates at 1.0
    for these users): an answer on defaults, or on another user's features, shows in its score."""
    root = tmp_path / "models"
    (root / "fraud" / "1").mkdir(parents=True)
    (root / "fraud" / "1" / "model.onnx").write_bytes(make_model(bias=-22.0))
    return root


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """`own_redis(*args)`: a redis-server of this test's own, started (extra args: its configuration)."""
    started: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        server = RedisServer(tmp_path, *args)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def azurite(tmp_path: Path) -> Iterator[AzuriteServer]:
    """An Azurite of this test's own, started."""
    server = AzuriteServer(tmp_path)
    server.start()
    yield server
    server.kill()


def over_redis(settings: Settings, url: str, **changes: object) -> Settings:
    """The test settings with Redis at `url` as feature store, cache, result and review store; answers
    name their defaulted features (ANSWER_DEFAULTED, as an operator watching an outage turns it on)."""
    return replace(  # type: ignore[arg-type]
        settings, redis_url=url, features_file=None, cache=CACHE, model_poll_s=0, answer_defaulted=True, **changes
    )


async def seeded(url: str) -> str:
    """Write the users' features (as the feature pipeline does); returns `url`."""
    await seed_redis(url, FEATURES)
    return url


@pytest.fixture
async def reference(
    settings: Settings, services: Callable[[Settings], Awaitable[ScoringService]], tmp_path: Path
) -> ScoringService:
    """The same model with the users' features from a file (no Redis): what every answer should be."""
    users = tmp_path / "reference-users.json"
    users.write_bytes(orjson.dumps(FEATURES))
    return await services(replace(settings, features_file=str(users), cache=replace(CACHE, l1_size=0)))


@pytest.fixture
def publisher() -> MemoryPublisher:
    """The output queues (risk-completed, risk-rejected), as duplicate detection keeps them."""
    return MemoryPublisher()


@pytest.fixture
def queue(publisher: MemoryPublisher) -> Queue:
    return Queue(publisher)


@pytest.fixture
async def replicas(publisher: MemoryPublisher) -> AsyncIterator[Callable[..., Replica]]:
    """`replicas(settings, publisher=None)`: a replica (not started) sending to the output queues
    (or through `publisher`); every one made is closed after the test."""
    made: list[Replica] = []

    def make(settings: Settings, publisher_: Publisher | None = None) -> Replica:
        replica = Replica(settings, publisher_ or publisher)
        made.append(replica)
        return replica

    yield make
    for replica in made:
        await replica.aclose()
