"""Provenance and promotion: a version is its digest, and a new one is a candidate until promoted."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from msgspec import to_builtins

from shared.core.service import ScoringService
from shared.domain.events import decode_event
from shared.errors import ModelInvalid, RolloutConflict, SettingsError
from shared.models.registry import ModelRegistry
from shared.models.repository import (
    BlobRepository,
    DirectoryRepository,
    ModelRef,
    Release,
    publish_version,
)
from shared.settings import BatchPolicy, OrtOptions, Settings
from shared.stores.control import Actor
from tests.conftest import event
from tests.models import hostile
from tests.onnx_models import make_model

REPO = Path(__file__).resolve().parents[2]
Services = Callable[[Settings], Awaitable[ScoringService]]
FRAUD_2 = ModelRef("fraud", "2")


def registry(root: Path, *, auto_promote: bool) -> ModelRegistry:
    return ModelRegistry(DirectoryRepository(root), OrtOptions(), BatchPolicy(max_size=8), auto_promote=auto_promote)


@pytest.fixture
async def candidates(models_dir: Path) -> AsyncIterator[ModelRegistry]:
    """A registry that serves fraud/1 and promotes nothing on arrival (Azure's default)."""
    reg = registry(models_dir, auto_promote=False)
    await reg.load_all()
    yield reg
    await reg.aclose()


async def test_a_new_version_is_a_candidate_until_promoted(candidates: ModelRegistry) -> None:
    await candidates.install("fraud", "2", make_model(bias=1.0))
    assert candidates.active("fraud").version == "1" and candidates.candidates("fraud") == ["1", "2"]
    assert candidates.active("fraud", "2").version == "2"  # NOTE: loaded: a shadow or canary may name it
    await candidates.promote("fraud", "2")
    assert candidates.active("fraud").version == "2" and candidates.candidates("fraud") == ["1"]
    await candidates.install("fraud", "3", make_model(bias=3.0))
    assert candidates.active("fraud").version == "2"  # a newer candidate never displaces a promoted version


async def test_a_pin_is_an_explicit_promote_and_a_release_falls_back_to_the_newest_promoted(
    candidates: ModelRegistry,
) -> None:
    await candidates.install("fraud", "2", make_model(bias=1.0))
    await candidates.pin("fraud", "2")  # what a canary's promote does too (shared/fleet/commands.py)
    await candidates.install("fraud", "3", make_model(bias=3.0))
    await candidates.unpin("fraud")
    assert candidates.active("fraud").version == "2" and candidates.candidates("fraud") == ["3"]


async def test_with_auto_promote_the_newest_serves_on_arrival(models_dir: Path) -> None:
    reg = registry(models_dir, auto_promote=True)
    await reg.load_all()
    try:
        await reg.install("fraud", "2", make_model(bias=1.0))
        assert reg.active("fraud").version == "2" and reg.candidates("fraud") == []
    finally:
        await reg.aclose()


async def test_a_release_record_checks_the_digest_and_never_promotes(
    candidates: ModelRegistry, models_dir: Path
) -> None:
    source = DirectoryRepository(models_dir)
    published = make_model(bias=1.0)
    crafted = json.dumps({"sha256": hashlib.sha256(published).hexdigest(), "promoted": True})
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "release.json").write_text(crafted)  # the older format, or an attacker's
    with pytest.raises(ModelInvalid, match=r"fraud/2: the file's sha256 \w+… is not the digest recorded at publish"):
        await candidates.install("fraud", "2", make_model(bias=2.0))  # swapped after publishing
    assert candidates.active("fraud").version == "1" and "recorded at publish" in candidates.last_error("fraud").reason
    await candidates.install("fraud", "2", published)
    assert candidates.active("fraud").version == "1" and candidates.candidates("fraud") == ["1", "2"]
    assert candidates.active("fraud", "2").digest == source.release(FRAUD_2)[0]


async def test_a_loaded_versions_file_may_not_change(candidates: ModelRegistry) -> None:
    await candidates.install("fraud", "2", make_model(bias=1.0))
    with pytest.raises(ModelInvalid, match="its file changed after it was loaded"):
        await candidates.install("fraud", "2", make_model(bias=2.0))
    assert candidates.active("fraud", "2").model.predict is not None


def test_publishing_records_the_digest_and_refuses_an_overwrite(models_dir: Path) -> None:
    source = DirectoryRepository(models_dir)
    data = make_model(bias=1.0)
    release = publish_version(source, FRAUD_2, data)
    assert release == Release(hashlib.sha256(data).hexdigest()) == source.release(FRAUD_2)
    assert publish_version(source, FRAUD_2, data) == release  # the same bytes again: nothing changes
    with pytest.raises(ModelInvalid, match="already published with sha256"):
        publish_version(source, FRAUD_2, make_model(bias=2.0))
    with pytest.raises(ModelInvalid, match="already published"):  # present without a record: its bytes count
        publish_version(source, ModelRef("fraud", "1"), make_model(bias=5.0))
    assert json.loads((models_dir / "fraud" / "2" / "release.json").read_text()) == {"sha256": release.sha256}


def test_a_corrupt_release_record_is_refused(models_dir: Path) -> None:
    (models_dir / "fraud" / "1" / "release.json").write_text(json.dumps({"sha256": "../../etc"}))
    with pytest.raises(ModelInvalid, match="holds no SHA-256 digest"):
        DirectoryRepository(models_dir).release(ModelRef("fraud", "1"))


def test_auto_promote_is_on_locally_and_gone_in_azure() -> None:
    assert Settings().promotes_on_arrival
    assert not Settings(model_storage_blob_uri="https://models.blob.core.windows.net").promotes_on_arrival
    assert not Settings(auto_promote=False).promotes_on_arrival
    assert Settings.from_env({"AUTO_PROMOTE": "false"}).auto_promote is False
    with pytest.raises(SettingsError, match="AUTO_PROMOTE: expected unset or false with ModelStorage__blobServiceUri"):
        Settings.from_env({"AUTO_PROMOTE": "true", "ModelStorage__blobServiceUri": "https://m.blob.core.windows.net"})


def publish(models_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The documented command as a newcomer runs it: no PYTHONPATH, from outside the repository."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env = {**base, "MODELS_DIR": str(models_dir), "ModelStorage": "", "ModelStorage__blobServiceUri": "", **(env or {})}
    command = [sys.executable, str(REPO / "scripts" / "publish_model.py"), *args]
    return subprocess.run(command, cwd=models_dir, env=env, capture_output=True, text=True, timeout=120)


def test_the_publish_command_records_and_refuses_an_overwrite(models_dir: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.onnx", tmp_path / "b.onnx"
    first.write_bytes(make_model(bias=1.0))
    second.write_bytes(make_model(bias=2.0))
    done = publish(models_dir, "fraud", "2", str(first))
    assert done.returncode == 0 and "a candidate until promoted" in done.stdout, done.stderr
    done = publish(models_dir, "fraud", "2", str(second))
    assert done.returncode == 1 and "already published" in done.stderr
    assert (models_dir / "fraud" / "2" / "model.onnx").read_bytes() == first.read_bytes()


def test_a_promote_needs_the_control_store(models_dir: Path) -> None:
    done = publish(models_dir, "fraud", "1", "--promote", env={"REDIS_URL": ""})
    assert done.returncode == 1 and "REDIS_URL" in done.stderr, done.stderr


# -- across replicas: Azurite and Redis --------------------------------------------------


@pytest.fixture
def container(azurite_connection: str) -> Iterator[BlobRepository]:
    from azure.storage.blob import BlobServiceClient

    name = f"models-{uuid.uuid4().hex[:10]}"
    client = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(name)
    client.create_container()
    source = BlobRepository(client)
    publish_version(source, ModelRef("fraud", "1"), make_model())
    yield source
    client.delete_container()


@pytest.fixture
async def fleet(
    settings: Settings,
    services: Services,
    container: BlobRepository,
    azurite_connection: str,
    redis_url: str,
    redis_prefix: str,
) -> tuple[ScoringService, ScoringService]:
    """Two replicas over one container and one Redis, with AUTO_PROMOTE off (as in Azure)."""
    shared = replace(
        settings, model_storage=azurite_connection, models_container=container.description.split()[-1],
        redis_url=redis_url, redis_prefix=redis_prefix, model_poll_s=0, features_file=None, auto_promote=False,
    )  # fmt: skip
    return await services(shared), await services(shared)


@pytest.fixture
async def three(
    settings: Settings,
    services: Services,
    container: BlobRepository,
    azurite_connection: str,
    redis_url: str,
    redis_prefix: str,
) -> tuple[list[ScoringService], dict[str, str]]:
    """Three replicas over one container and one Redis, AUTO_PROMOTE off; and the environment a newcomer's
    shell would hold to reach the same fleet."""
    shared = replace(
        settings, model_storage=azurite_connection, models_container=container.description.split()[-1],
        redis_url=redis_url, redis_prefix=redis_prefix, model_poll_s=0, features_file=None, auto_promote=False,
    )  # fmt: skip
    env = {
        "ModelStorage": azurite_connection, "MODELS_CONTAINER": shared.models_container, "REDIS_URL": redis_url,
        "REDIS_KEY_PREFIX": redis_prefix, "AUTO_PROMOTE": "false",
    }  # fmt: skip
    return [await services(shared) for _ in range(3)], env


async def test_a_crafted_release_record_that_says_promoted_changes_nothing_served(
    three: tuple[list[ScoringService], dict[str, str]], container: BlobRepository, azurite_connection: str
) -> None:
    from azure.storage.blob import BlobServiceClient

    replicas, env = three
    data = make_model(bias=4.0)
    container.publish(FRAUD_2, data)  # whoever can write the container writes both
    crafted = json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "promoted": True}).encode()
    blobs = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(env["MODELS_CONTAINER"])
    blobs.upload_blob("fraud/2/release.json", crafted, overwrite=True)
    await replicas[0].admin.install_model(FRAUD_2, data)  # the Blob trigger
    await until(lambda: all("2" in to_builtins(r.models())[0]["versions"] for r in replicas))
    assert [await served(r) for r in replicas] == ["1", "1", "1"]


async def test_the_documented_promote_reaches_every_replica_within_10_s_and_the_audit_says_who(
    three: tuple[list[ScoringService], dict[str, str]], container: BlobRepository, models_dir: Path
) -> None:
    replicas, env = three
    data = make_model(bias=1.0, thresholds=(0.4, 0.8))
    publish_version(container, FRAUD_2, data)
    await replicas[0].admin.install_model(FRAUD_2, data)
    assert [await served(r) for r in replicas] == ["1", "1", "1"]
    done = await asyncio.to_thread(
        publish, models_dir, "fraud", "2", "--promote", "--reason", "weekly retrain", env=env
    )
    assert done.returncode == 0, done.stderr
    started = time.monotonic()
    await until(lambda: all(r.active("fraud").version == "2" for r in replicas), seconds=10.0)
    assert time.monotonic() - started < 10
    assert {r.active("fraud").digest for r in replicas} == {hashlib.sha256(data).hexdigest()}
    assert [await served(r) for r in replicas] == ["2", "2", "2"]
    [last, *_] = await replicas[2].admin.control_actions("fraud")
    assert last.action == "pin" and last.version == "2" and "scripts/publish_model.py" in last.who
    assert "weekly retrain" in last.reason


async def test_a_promote_states_a_threshold_change_and_refuses_a_version_that_could_never_decline(
    fleet: tuple[ScoringService, ScoringService], container: BlobRepository
) -> None:
    a, b = fleet
    never = make_model(bias=1.0, thresholds=(1.0, 1.0))
    publish_version(container, FRAUD_2, never)
    await a.admin.install_model(FRAUD_2, never)
    with pytest.raises(RolloutConflict, match=r"fraud/2 could never decline: its decline threshold is 1"):
        await a.admin.pin("fraud", "2", by=Actor("ops"))
    assert (await served(a), await served(b)) == ("1", "1")
    await a.admin.pin("fraud", "2", by=Actor("ops", "on purpose"), allow_never_decline=True)
    await until(lambda: b.active("fraud").version == "2")
    [last, *_] = await a.admin.control_actions("fraud")
    assert "thresholds change: review 0.5 → 1, decline 0.85 → 1 (from fraud/1)" in last.reason, last


async def served(replica: ScoringService) -> str:
    return (await replica.score(decode_event(json.dumps(event()).encode()))).model_version


async def until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "did not converge in time"
        await asyncio.sleep(0.02)


async def test_publish_candidate_promote_across_two_replicas(
    fleet: tuple[ScoringService, ScoringService], container: BlobRepository
) -> None:
    a, b = fleet
    data = make_model(bias=1.0)
    publish_version(container, FRAUD_2, data)
    await a.admin.install_model(FRAUD_2, data)  # the Blob trigger, on the one replica it fires on
    await until(lambda: "2" in to_builtins(b.models())[0]["versions"])  # the fleet loads (and tries) the candidate
    assert (await served(a), await served(b)) == ("1", "1")
    await a.admin.pin("fraud", "2")  # the explicit promote (POST /api/models/fraud/activate)
    await until(lambda: b.active("fraud").version == "2")
    assert (await served(a), await served(b)) == ("2", "2")
    assert a.active("fraud").digest == b.active("fraud").digest == hashlib.sha256(data).hexdigest()


async def test_a_blob_swapped_after_publishing_is_refused_by_its_digest(
    fleet: tuple[ScoringService, ScoringService], container: BlobRepository
) -> None:
    a, _ = fleet
    ref = ModelRef("fraud", "3")
    publish_version(container, ref, make_model(bias=1.0))
    swapped = make_model(bias=9.0)
    container.publish(ref, swapped)  # someone with write access replaces the file, not the record
    with pytest.raises(ModelInvalid, match="is not the digest recorded at publish"):
        await a.admin.install_model(ref, swapped)
    assert await served(a) == "1" and a.models()[0].last_error is not None


async def test_a_version_whose_trial_never_reached_its_decline_threshold_is_refused(
    fleet: tuple[ScoringService, ScoringService], container: BlobRepository
) -> None:
    """Not 1.0, but above every score the trial's adversarial rows produced: it could never decline either."""
    a, _ = fleet
    flat = hostile.constant_score(-1.0)  # sigmoid(-1) = 0.27 for every event; decline at 0.85
    publish_version(container, FRAUD_2, flat)
    await a.admin.install_model(FRAUD_2, flat)
    with pytest.raises(RolloutConflict, match=r"above every score its trial produced \(at most 0.2689"):
        await a.admin.pin("fraud", "2", by=Actor("ops"))
    assert await served(a) == "1"
