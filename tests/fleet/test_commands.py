"""The operator's shadow, canary, abort and promote, fleet-wide: record first, refused with a reason, nothing changed when the store says no."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from shared.errors import BadRequest, ControlStoreDown, ModelNotFound, RolloutConflict
from shared.fleet.keys import CanaryRecord, ShadowRecord, canary_key, shadow_key
from shared.stores.control import MemoryControlStore
from tests.fleet.replicas import WATCH_S, Replicas, pinned_pair, publish, until

if TYPE_CHECKING:
    from redis.asyncio import Redis


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


# -- what is refused --------------------------------------------------------------------------


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
