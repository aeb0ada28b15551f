"""Shadows and canary splits across replicas: registries that share nothing but Redis and a model source."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from shared.errors import BadRequest, ControlStoreDown, ModelNotFound, RolloutConflict
from shared.fleet.keys import CanaryRecord, ShadowRecord, canary_key, shadow_key
from shared.fleet.traffic import Traffic, bucket
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.settings import BatchPolicy, OrtOptions, RolloutPolicy
from shared.stores.control import ControlStore, MemoryControlStore, RedisControlStore
from tests.onnx_models import make_model

if TYPE_CHECKING:
    from redis.asyncio import Redis

REPO = Path(__file__).resolve().parents[2]
WATCH_S = 0.05
POLICY = RolloutPolicy(canary_window=1000, canary_min_events=200, canary_max_decline_delta=0.05)
USERS = [f"user-{i}" for i in range(20_000)]


@dataclass
class Replica:
    registry: ModelRegistry
    rollout: Rollout
    traffic: Traffic
    control: ControlStore
    jobs: list[asyncio.Task[None]]

    def canary_users(self, users: list[str] = USERS[:2000]) -> set[str]:
        return {u for u in users if self.traffic.canary_for("fraud", u) is not None}

    def live(self) -> str:
        return self.registry.active("fraud").version

    async def aclose(self) -> None:
        for job in self.jobs:
            job.cancel()
        _, running = await asyncio.wait(self.jobs, timeout=5)
        assert not running  # NOTE: one cancel ends every watch (the control store honours it: gh-86296)
        await self.registry.aclose()
        await self.control.aclose()


Replicas = Callable[..., Awaitable[Replica]]


@pytest.fixture
async def replicas(
    models_dir: Path, redis_url: str, redis_prefix: str, redis_client: object
) -> AsyncIterator[Replicas]:
    """`await replicas()` starts a replica over the one model source and Redis prefix (closed after the test)."""
    from redis.asyncio import Redis

    started: list[Replica] = []

    async def start(*, keep: int = 2, control: ControlStore | None = None, policy: RolloutPolicy = POLICY) -> Replica:
        registry = ModelRegistry(
            DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8), keep
        )
        store = control or RedisControlStore(Redis.from_url(redis_url), prefix=redis_prefix)
        rollout = Rollout(registry, registry.repository, store, poll_s=0, watch_s=WATCH_S)
        traffic = Traffic(registry, rollout, store, policy, watch_s=WATCH_S)
        await rollout.restore_pins()
        await registry.load_all()
        await traffic.restore()
        replica = Replica(registry, rollout, traffic, store, [])
        replica.jobs = [asyncio.create_task(rollout.run()), asyncio.create_task(traffic.run())]
        started.append(replica)
        return replica

    yield start
    for replica in started:
        await replica.aclose()


def publish(models_dir: Path, *versions: str) -> None:
    for version in versions:
        DirectoryRepository(models_dir).publish(ModelRef("fraud", version), make_model(bias=float(version)))


async def until(check: Callable[[], bool], seconds: float = 5.0) -> float:
    """Wait until `check()` holds (bounded); the time it took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "did not converge in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def pinned_pair(replicas: Replicas, models_dir: Path) -> tuple[Replica, Replica]:
    """Two replicas over fraud/1 and fraud/2 with 1 pinned fleet-wide: 2 is the candidate."""
    publish(models_dir, "2")
    a, b = await replicas(), await replicas()
    await a.rollout.pin("fraud", "1")
    await until(lambda: b.live() == "1")
    return a, b


def drive(traffic: Traffic, arm: str, events: int, declines_per_100: int, errors_per_100: int = 0) -> None:
    """`events` decisions of one arm, as evenly spread as counts allow: so many declines and errors per 100."""
    declines = errors = 0
    for i in range(1, events + 1):
        if errors < i * errors_per_100 // 100:
            errors, decision = errors + 1, "error"
        elif declines < i * declines_per_100 // 100:
            declines, decision = declines + 1, "decline"
        else:
            decision = "approve"
        traffic.observe("fraud", arm, decision)  # type: ignore[arg-type]


# -- the split --------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", [0.01, 0.1, 0.5, 0.9])
def test_a_split_takes_close_to_its_weight_of_many_users(weight: float) -> None:
    # NOTE: an ideal hash makes the canary's count Binomial(n, weight); 5 standard deviations
    # (0.7 points of 20,000 users at 0.1) fail a fair hash about once in 3.5 million runs.
    # The hash is deterministic, so this run is the same every time: a bias would show here.
    share = sum(bucket("fraud", u) < weight for u in USERS) / len(USERS)
    assert abs(share - weight) <= 5 * math.sqrt(weight * (1 - weight) / len(USERS))


def test_a_users_bucket_is_the_same_in_another_process() -> None:
    """Not Python's `hash()`, which each process salts (PYTHONHASHSEED): a replica is a process."""
    code = "import json; from shared.fleet.traffic import bucket; print(json.dumps([bucket('fraud', f'user-{i}') for i in range(100)]))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [bucket("fraud", f"user-{i}") for i in range(100)]
    assert bucket("fraud", "user-1") != bucket("other", "user-1")  # each model splits its users anew


async def test_a_canary_takes_its_weight_of_users_on_a_replica(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.1)
    routed = [a.traffic.canary_for("fraud", u) for u in USERS]
    share = sum(m is not None for m in routed) / len(USERS)
    assert abs(share - 0.1) <= 5 * math.sqrt(0.1 * 0.9 / len(USERS))
    assert {m.version for m in routed if m is not None} == {"2"}


async def test_a_user_keeps_their_arm_on_every_replica_and_after_a_restart(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    publish(models_dir, "3")
    await a.traffic.set_canary("fraud", "2", 0.2)
    await a.traffic.set_shadow("fraud", "3")
    await until(lambda: b.traffic.split("fraud"))
    chosen = a.canary_users()
    assert 300 < len(chosen) < 500 and b.canary_users() == chosen
    await b.aclose()
    rebuilt = await replicas()
    assert rebuilt.live() == "1" and rebuilt.canary_users() == chosen  # restored before any tick
    shadow = rebuilt.traffic.shadow_of("fraud")
    assert shadow is not None and shadow.version == "3"


async def test_raising_the_weight_keeps_earlier_canary_users_in_the_canary(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.1)
    first = a.canary_users()
    await a.traffic.set_canary("fraud", "2", 0.3)
    raised = a.canary_users()
    assert first < raised and len(raised) > 2.5 * len(first)
    await until(lambda: b.canary_users() == raised)


async def test_without_a_split_nothing_is_routed_and_nothing_observed(replicas: Replicas) -> None:
    a = await replicas()
    assert a.traffic.canary_for("fraud", "u1") is None and a.traffic.shadow_of("fraud") is None
    a.traffic.observe("fraud", "live", "decline")
    assert not a.traffic.split("fraud") and a.traffic.describe("fraud") == (None, None, None)


# -- set, promote, abort: fleet-wide ----------------------------------------------------------


async def test_a_shadow_and_a_canary_set_on_one_replica_reach_the_other_within_a_tick(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    publish(models_dir, "3")
    await a.traffic.set_canary("fraud", "2", 0.5)
    took = await until(lambda: b.traffic.split("fraud"))
    await a.traffic.set_shadow("fraud", "3")
    took = max(took, await until(lambda: b.traffic.shadow_of("fraud") is not None))
    assert took < WATCH_S + 1.0  # a tick, plus loading the version from the source
    shadow = b.traffic.shadow_of("fraud")
    assert shadow is not None and shadow.version == "3" and b.live() == "1"
    _, canary, _ = b.traffic.describe("fraud")
    assert canary is not None and (canary.version, canary.weight, canary.live.version) == ("2", 0.5, "1")
    await b.traffic.set_shadow("fraud", None)  # a release is a record too
    await until(lambda: a.traffic.shadow_of("fraud") is None)


async def test_a_shadow_and_a_canary_name_their_files_and_a_record_naming_another_file_is_not_followed(
    replicas: Replicas, models_dir: Path, redis_client: Redis, redis_prefix: str
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    publish(models_dir, "3")
    await a.traffic.set_canary("fraud", "2", 0.5)
    await a.traffic.set_shadow("fraud", "3")
    await until(lambda: bool(b.traffic.split("fraud")) and b.traffic.shadow_of("fraud") is not None)
    canary_payload = await redis_client.get(redis_prefix + canary_key("fraud"))
    shadow_payload = await redis_client.get(redis_prefix + shadow_key("fraud"))
    canary = msgspec.json.decode(canary_payload or b"", type=CanaryRecord)
    shadow = msgspec.json.decode(shadow_payload or b"", type=ShadowRecord)
    for version, named in (("2", canary.sha256), ("3", shadow.sha256)):
        file = (models_dir / "fraud" / version / "model.onnx").read_bytes()
        assert named == hashlib.sha256(file).hexdigest() == b.registry.active("fraud", version).digest

    # records naming other files for 2 and 3 (a replica that read swapped files, a forged write)
    other = hashlib.sha256(b"another file").hexdigest()
    for key, record in ((canary_key("fraud"), canary), (shadow_key("fraud"), shadow)):
        forged = msgspec.structs.replace(record, sha256=other, at=time.time())
        await redis_client.set(redis_prefix + key, msgspec.json.encode(forged))
    await until(lambda: not b.traffic.split("fraud") and b.traffic.shadow_of("fraud") is None)
    assert not b.canary_users() and b.live() == "1", "neither file routed to; the pinned version serves"


async def test_promote_makes_the_candidate_the_pin_on_every_replica(replicas: Replicas, models_dir: Path) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.1)
    await until(lambda: b.traffic.split("fraud"))
    await b.traffic.promote("fraud")
    await until(lambda: a.live() == "2" and not a.traffic.split("fraud"))
    assert b.live() == "2" and a.registry.pinned("fraud") == b.registry.pinned("fraud") == "2"
    assert a.traffic.canary_for("fraud", "anyone") is None and a.traffic.describe("fraud")[1] is None
    with pytest.raises(RolloutConflict):
        await a.traffic.promote("fraud")  # nothing left to promote


async def test_promoting_the_shadowed_candidate_releases_the_shadow_everywhere(
    replicas: Replicas, models_dir: Path
) -> None:
    """The recipe shadows the candidate, then canaries and promotes it: once it serves, a shadow of
    itself would score every event twice by the same model."""
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_shadow("fraud", "2")
    await a.traffic.set_canary("fraud", "2", 0.1)
    await until(lambda: b.traffic.split("fraud") and b.traffic.shadow_of("fraud") is not None)
    await b.traffic.promote("fraud")
    await until(lambda: a.live() == "2" and a.traffic.shadow_of("fraud") is None)
    assert b.traffic.shadow_of("fraud") is None and b.traffic.describe("fraud")[0] is None


async def test_an_abort_stops_the_canary_on_every_replica_and_keeps_why(
    replicas: Replicas, models_dir: Path, redis_client: object, redis_prefix: str
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    await until(lambda: b.traffic.split("fraud"))
    await a.traffic.abort("fraud")
    await until(lambda: not b.canary_users())
    assert not a.canary_users() and a.live() == b.live() == "1"
    _, canary, abort = b.traffic.describe("fraud")
    assert canary is None and abort is not None and (abort.version, abort.reason) == ("2", "api")
    stored = msgspec.json.decode(await redis_client.get(redis_prefix + canary_key("fraud")), type=CanaryRecord)  # type: ignore[attr-defined]
    assert stored.weight == 0 and stored.aborted is not None and stored.aborted.reason == "api"
    with pytest.raises(RolloutConflict):
        await a.traffic.promote("fraud")  # an aborted candidate is set again first
    await a.traffic.set_canary("fraud", "2", 0.5)  # set again: it routes, and the last abort is still told
    await until(lambda: bool(b.canary_users()))
    assert b.traffic.describe("fraud")[2] == abort


# -- the automatic abort ----------------------------------------------------------------------


async def test_a_candidate_declining_20_points_more_is_aborted_on_every_replica(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    await until(lambda: b.traffic.split("fraud"))
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 199, declines_per_100=30)
    assert a.traffic.split("fraud")  # not yet: the candidate has 199 decisions
    drive(a.traffic, "canary", 1, declines_per_100=30)
    assert not a.traffic.split("fraud") and not a.canary_users()  # at once, here
    await until(lambda: not b.traffic.split("fraud"))  # and everywhere within a tick
    abort = b.traffic.describe("fraud")[2]
    assert abort is not None and (abort.version, abort.reason) == ("2", "decline_share")


async def test_a_candidate_declining_far_fewer_is_aborted_too(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 1000, declines_per_100=30)
    drive(a.traffic, "canary", 200, declines_per_100=10)  # a candidate that lets fraud through
    abort = a.traffic.describe("fraud")[2]
    assert not a.traffic.split("fraud") and abort is not None and abort.reason == "decline_share"


async def test_a_candidate_that_errs_more_is_aborted_for_its_error_rate(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 1000, declines_per_100=10, errors_per_100=3)
    assert not a.traffic.split("fraud")
    abort = a.traffic.describe("fraud")[2]
    assert abort is not None and abort.reason == "error_rate"


async def test_a_candidate_within_the_bound_is_not_aborted(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 3000, declines_per_100=10)
    drive(a.traffic, "canary", 3000, declines_per_100=14)  # 4 points more: within 5
    drive(a.traffic, "canary", 3000, declines_per_100=6)  # 4 points fewer: within 5
    assert a.traffic.split("fraud")
    _, canary, abort = a.traffic.describe("fraud")
    assert abort is None and canary is not None
    assert canary.canary.events == 1000 and canary.canary.decline_share == pytest.approx(0.06, abs=0.005)


async def test_too_few_events_never_abort(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "canary", 199, declines_per_100=100)
    drive(a.traffic, "live", 5000, declines_per_100=0)
    assert a.traffic.split("fraud") and a.traffic.describe("fraud")[2] is None


async def test_an_abort_the_store_did_not_keep_holds_here_and_is_kept_once_it_can_be(
    replicas: Replicas, models_dir: Path
) -> None:
    publish(models_dir, "2")
    store = MemoryControlStore()
    a = await replicas(control=store)
    await a.traffic.set_canary("fraud", "1", 0.5)
    store.down = True
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 200, declines_per_100=40)
    await asyncio.sleep(5 * WATCH_S)
    assert not a.canary_users() and "not kept in Redis" in (a.traffic.problem() or "")  # routes none, says so
    store.down = False
    await until(lambda: a.traffic.problem() is None)
    stored = msgspec.json.decode(store.data[canary_key("fraud")], type=CanaryRecord)
    assert stored.aborted is not None and stored.aborted.reason == "decline_share" and not a.canary_users()


@pytest.mark.parametrize("watch", ["traffic", "rollout"])
async def test_the_watch_ends_when_cancelled_even_mid_read(
    models_dir: Path, redis_url: str, redis_prefix: str, redis_client: object, watch: str
) -> None:
    """redis-py's wait_for drops a cancel landing on a read (CPython 3.11, gh-86296): the control
    store raises it again, so neither fleet watch runs on past shutdown."""
    from shared.stores.cache.redis_tier import redis_client as client_for

    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8))
    await registry.load_all()
    store = RedisControlStore(client_for(redis_url, timeout_s=1.0), prefix=redis_prefix)  # as built in production
    rollout = Rollout(registry, registry.repository, store, poll_s=0, watch_s=0)
    traffic = Traffic(registry, rollout, store, POLICY, watch_s=0)
    run = traffic.run if watch == "traffic" else rollout.run
    missed = 0
    try:
        for _ in range(300):
            watch_task = asyncio.create_task(run())
            await asyncio.sleep(random.random() * 0.003)  # noqa: S311 not a secret: a moment
            watch_task.cancel()
            _, running = await asyncio.wait([watch_task], timeout=0.5)
            missed += bool(running)
            while not watch_task.done():
                watch_task.cancel()
                await asyncio.wait([watch_task], timeout=0.1)
    finally:
        await registry.aclose()
        await store.aclose()
    assert missed == 0


# -- holding versions -------------------------------------------------------------------------


async def test_shadow_and_canary_versions_stay_loaded_beyond_keep_while_named(
    replicas: Replicas, models_dir: Path
) -> None:
    publish(models_dir, "2", "3")
    a, b = await replicas(keep=1), await replicas(keep=1)
    assert a.registry.loaded_versions("fraud") == ["3"]
    await a.traffic.set_shadow("fraud", "2")
    await a.traffic.set_canary("fraud", "1", 0.1)  # an older version: no pin needed
    assert a.registry.loaded_versions("fraud") == ["1", "2", "3"] and a.live() == "3"
    await until(lambda: b.registry.loaded_versions("fraud") == ["1", "2", "3"] and b.traffic.split("fraud"))
    assert b.live() == "3"
    await a.traffic.set_shadow("fraud", None)
    assert a.registry.loaded_versions("fraud") == ["1", "3"]
    await a.traffic.abort("fraud")
    assert a.registry.loaded_versions("fraud") == ["3"]
    await until(lambda: b.registry.loaded_versions("fraud") == ["3"])


# -- what is refused ---------------------------------------------------------------------------


async def test_a_split_that_would_change_what_serves_is_refused(replicas: Replicas, models_dir: Path) -> None:
    publish(models_dir, "2")
    a = await replicas()
    assert a.live() == "2"
    with pytest.raises(RolloutConflict, match=r"activate"):
        await a.traffic.set_canary("fraud", "2", 0.1)  # the live version
    publish(models_dir, "3")
    with pytest.raises(RolloutConflict, match=r"would become"):
        await a.traffic.set_shadow("fraud", "3")  # newer, and nothing pinned: loading it would swap
    with pytest.raises(ModelNotFound):
        await a.traffic.set_canary("fraud", "77", 0.1)
    with pytest.raises(BadRequest):
        await a.traffic.set_canary("fraud", "1", 1.5)
    with pytest.raises(ModelNotFound):
        await a.traffic.set_shadow("nope", "1")
    assert a.live() == "2" and a.registry.loaded_versions("fraud") == ["1", "2"]
    assert a.traffic.describe("fraud") == (None, None, None)


async def test_with_the_store_down_a_change_raises_and_changes_nothing(replicas: Replicas, models_dir: Path) -> None:
    publish(models_dir, "2", "3")
    store = MemoryControlStore()
    a = await replicas(keep=1, control=store)
    await a.traffic.set_canary("fraud", "1", 0.2)
    routed = a.canary_users()
    store.down = True
    for change in (
        a.traffic.set_canary("fraud", "1", 0.9),
        a.traffic.set_canary("fraud", "2", 0.5),
        a.traffic.set_shadow("fraud", "2"),
        a.traffic.abort("fraud"),
        a.traffic.promote("fraud"),
    ):
        with pytest.raises(ControlStoreDown):
            await change
    assert a.canary_users() == routed and a.traffic.shadow_of("fraud") is None
    assert a.registry.loaded_versions("fraud") == ["1", "3"] and a.live() == "3"
    assert a.traffic.problem() is not None and a.traffic.problem().startswith("control: ")  # type: ignore[union-attr]


async def test_a_lost_record_is_written_back(
    replicas: Replicas, models_dir: Path, redis_client: object, redis_prefix: str
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.3)
    await a.traffic.set_shadow("fraud", "2")
    await until(lambda: b.traffic.split("fraud"))
    await redis_client.delete(redis_prefix + canary_key("fraud"), redis_prefix + shadow_key("fraud"))  # type: ignore[attr-defined]
    await until(lambda: "written back" in (a.traffic.problem() or "") + (b.traffic.problem() or ""))
    assert await redis_client.get(redis_prefix + canary_key("fraud")) is not None  # type: ignore[attr-defined]
    assert await redis_client.get(redis_prefix + shadow_key("fraud")) is not None  # type: ignore[attr-defined]
    assert a.traffic.split("fraud") and b.traffic.split("fraud")
