"""Ensembles served like models: declared beside them, members through their own batchers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from msgspec import to_builtins

from shared.core.service import ScoringService
from shared.domain.spec import FeatureDef
from shared.errors import ModelInvalid, ModelNotFound
from shared.models.ensembles.declaration import parse_declaration
from shared.models.repository import BlobRepository, DirectoryRepository, ModelRef
from shared.settings import Settings
from tests.conftest import event
from tests.onnx_models import DEFAULT_FEATURES, make_model

Build = Callable[[Settings], Awaitable[ScoringService]]
B_FEATURES = (FeatureDef("amount", 0.0), FeatureDef("log_amount", 0.0), FeatureDef("hour", 12.0))


def declare(root: Path, name: str, body: dict[str, Any], version: str = "1") -> Path:
    folder = root / name / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ensemble.json").write_text(json.dumps(body))
    return folder


def add_model(root: Path, name: str, version: str, data: bytes) -> None:
    (root / name / version).mkdir(parents=True, exist_ok=True)
    (root / name / version / "model.onnx").write_bytes(data)


@pytest.fixture
def two_models(models_dir: Path) -> Path:
    add_model(models_dir, "fraud_b", "1", make_model(bias=-2.0, features=B_FEATURES))
    return models_dir


MEMBERS = [{"name": "fraud"}, {"name": "fraud_b"}]


def union_row(n: int = 1, seed: int = 0) -> np.ndarray:
    """Rows over the union of the members' columns: fraud's four, then amount and hour."""
    rng = np.random.default_rng(seed)
    return rng.random((n, len(DEFAULT_FEATURES) + 2), dtype=np.float32)


async def member_scores(service: ScoringService, row: np.ndarray) -> tuple[float, float]:
    a = await service.infer("fraud", None, [row[:4].copy()])
    b = await service.infer("fraud_b", None, [row[[4, 0, 5]].copy()])  # amount, log_amount, hour
    return a.scores[0], b.scores[0]


async def test_weighted_average_over_the_union_of_columns(
    two_models: Path, settings: Settings, services: Build
) -> None:
    declare(two_models, "combo", {"members": MEMBERS, "method": "weighted_average", "weights": [3, 1]})
    service = await services(settings)
    info = service.metadata("combo")
    assert info.platform == "ensemble" and info.versions == ["1"]
    assert info.features == ["log_amount", "channel=web", "user_avg_amount_30d", "user_txn_count_24h", "amount", "hour"]
    assert info.inputs[0].shape == (-1, 6)
    row = union_row()[0]
    a, b = await member_scores(service, row)
    done = await service.infer("combo", None, [row])
    assert done.scores[0] == pytest.approx((3 * a + b) / 4) and (done.model, done.model_version) == ("combo", "1")


async def test_voting_counts_members_over_their_thresholds(
    two_models: Path, settings: Settings, services: Build
) -> None:
    declare(two_models, "vote", {"members": MEMBERS, "method": "voting", "thresholds": [0.0, 1.0]})
    service = await services(settings)
    done = await service.infer("vote", None, list(union_row(3)))
    assert done.scores == [0.5, 0.5, 0.5]  # fraud always votes (>= 0), fraud_b never reaches 1.0


async def test_stacking_runs_the_meta_model_on_the_members_scores(
    two_models: Path, settings: Settings, services: Build
) -> None:
    meta = make_model(bias=0.3, features=(FeatureDef("fraud", 0.5), FeatureDef("fraud_b", 0.5)), thresholds=(0.4, 0.9))
    folder = declare(two_models, "stack", {"members": MEMBERS, "method": "stacking", "meta_model": "meta.onnx"})
    (folder / "meta.onnx").write_bytes(meta)
    service = await services(settings)
    row = union_row()[0]
    a, b = await member_scores(service, row)
    done = await service.infer("stack", None, [row])
    expected = 1 / (1 + np.exp(-(0.1 * a + 0.5 * b + 0.3)))  # the tiny model: linspace(0.1, 0.5) weights
    assert done.scores[0] == pytest.approx(expected, rel=1e-5)
    assert service.active("fraud").spec.thresholds.review == 0.5
    scored = await service.score_json(json.dumps(event()).encode(), "stack")
    assert set(scored.scores) == {"fraud/1", "fraud_b/1", "model"}  # each member's opinion, then the ensemble's


async def test_api_score_on_an_ensemble_lists_each_members_score(
    two_models: Path, settings: Settings, services: Build
) -> None:
    declare(two_models, "combo", {"members": MEMBERS, "method": "weighted_average", "weights": [1, 1],
                                  "decision": {"review": 0.1, "decline": 0.2}})  # fmt: skip
    service = await services(settings)
    scored = await service.score_json(json.dumps(event()).encode(), "combo")
    body = to_builtins(scored)
    assert (body["model"], body["model_version"]) == ("combo", "1")
    parts = body["scores"]
    assert isinstance(parts, dict) and set(parts) == {"fraud/1", "fraud_b/1", "model"}
    assert parts["model"] == pytest.approx((parts["fraud/1"] + parts["fraud_b/1"]) / 2, abs=2e-6)
    assert body["decision"] == "decline" and "0.2" in str(body["reason"])  # the declared cut-offs
    fraud_alone = await service.score_json(json.dumps(event()).encode())
    assert "scores" not in to_builtins(fraud_alone)  # the default model answers as before


async def test_a_member_reload_is_picked_up_without_a_restart(
    two_models: Path, settings: Settings, services: Build
) -> None:
    declare(two_models, "combo", {"members": MEMBERS, "method": "weighted_average", "weights": [1, 0]})
    service = await services(settings)
    row = union_row()[0]
    before = (await service.infer("combo", None, [row])).scores[0]
    await service.admin.install_model(ModelRef("fraud", "2"), make_model(bias=2.0))
    after = (await service.infer("combo", None, [row])).scores[0]
    assert after == pytest.approx((await service.infer("fraud", "2", [row[:4].copy()])).scores[0]) and after > before
    scored = await service.score_json(json.dumps(event()).encode(), "combo")
    assert "fraud/2" in scored.scores


async def test_an_ensemble_whose_member_fails_validation_is_not_activated(
    two_models: Path, settings: Settings, services: Build
) -> None:
    add_model(two_models, "broken", "1", b"not an onnx file")
    declare(two_models, "combo", {"members": [{"name": "fraud"}, {"name": "broken"}], "method": "voting",
                                  "thresholds": [0.5, 0.5]})  # fmt: skip
    declare(two_models, "pinned", {"members": [{"name": "fraud"}, {"name": "fraud_b", "version": "7"}],
                                   "method": "weighted_average", "weights": [1, 1]})  # fmt: skip
    service = await services(settings)
    assert service.readiness().ready  # the models serve
    with pytest.raises(ModelNotFound, match="ensemble 'combo' is not active: no model named 'broken'"):
        await service.infer("combo", None, list(union_row()))
    assert not service.model_ready("pinned") and service.model_ready("fraud")
    described = {m["name"]: m for m in to_builtins(service.models())}
    assert described["pinned"]["ensemble"] is None
    assert "no loaded version '7'" in str(described["pinned"]["last_error"])


async def test_a_version_other_than_the_ensembles_is_not_found(
    two_models: Path, settings: Settings, services: Build
) -> None:
    declare(two_models, "combo", {"members": MEMBERS, "method": "weighted_average", "weights": [1, 1]}, version="3")
    service = await services(settings)
    assert service.model_ready("combo", "3") and not service.model_ready("combo", "1")
    with pytest.raises(ModelNotFound, match="ensemble 'combo' has no version '1'"):
        service.metadata("combo", "1")


async def test_without_a_declaration_the_model_list_is_the_registrys(settings: Settings, services: Build) -> None:
    """Without a declaration nothing changes: the model list is the registry's."""
    service = await services(settings)
    assert [m["name"] for m in to_builtins(service.models())] == ["fraud"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"members": [{"name": "fraud"}], "method": "voting", "thresholds": [0.5]}, "at least two"),
        ({"members": MEMBERS, "method": "median"}, "method must be one of"),
        ({"members": MEMBERS, "method": "weighted_average", "weights": [1]}, "one number per member"),
        ({"members": MEMBERS, "method": "weighted_average", "weights": [0, 0]}, "positive sum"),
        ({"members": MEMBERS, "method": "voting", "thresholds": [0.5, 1.5]}, "within \\[0, 1\\]"),
        ({"members": MEMBERS, "method": "stacking", "meta_model": "model.onnx"}, "not model.onnx"),
        ({"members": MEMBERS, "method": "stacking", "meta_model": "../x.onnx"}, "meta_model must be"),
        ({"members": [{"name": "fraud"}, {"name": "fraud"}], "method": "voting", "thresholds": [1, 1]}, "twice"),
        ({"members": [{"name": "combo"}, {"name": "fraud"}], "method": "voting", "thresholds": [1, 1]}, "own member"),
        ({"members": [{"name": "../x"}, {"name": "fraud"}], "method": "voting", "thresholds": [1, 1]}, "must match"),
        ({"members": MEMBERS, "method": "voting", "thresholds": [1, 1], "decision": {"review": 2}}, "decision needs"),
    ],
)
def test_a_bad_declaration_names_what_is_wrong(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelInvalid, match=message):
        parse_declaration("combo", "1", json.dumps(body).encode())


async def test_a_stacking_meta_model_must_name_the_members(
    two_models: Path, settings: Settings, services: Build
) -> None:
    folder = declare(two_models, "stack", {"members": MEMBERS, "method": "stacking"})
    (folder / "meta.onnx").write_bytes(make_model(features=(FeatureDef("x", 0.5), FeatureDef("y", 0.5))))
    service = await services(settings)
    assert not service.model_ready("stack")
    assert "serving.features must be the members ['fraud', 'fraud_b']" in str(
        to_builtins(service.models())[-1]["last_error"]
    )


def test_declarations_come_from_both_sources(two_models: Path, azurite_connection: str) -> None:
    declare(two_models, "combo", {"members": MEMBERS, "method": "voting", "thresholds": [0.5, 0.5]}, version="2")
    assert DirectoryRepository(two_models).ensembles() == (ModelRef("combo", "2"),)
    from azure.storage.blob import BlobServiceClient

    name = f"ens-{uuid.uuid4().hex[:8]}"
    container = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(name)
    container.create_container()
    try:
        container.upload_blob("combo/2/ensemble.json", b'{"members": []}')
        container.upload_blob("combo/2/meta.onnx", b"meta")
        container.upload_blob("fraud/1/model.onnx", b"model")
        source = BlobRepository.connect(container=name, connection_string=azurite_connection, blob_uri=None)
        assert source.ensembles() == (ModelRef("combo", "2"),) and source.list() == [ModelRef("fraud", "1")]
        assert source.read_file(ModelRef("combo", "2"), "meta.onnx") == b"meta"
        with pytest.raises(ModelInvalid, match="file name"):
            source.read_file(ModelRef("combo", "2"), "../fraud/1/model.onnx")
    finally:
        container.delete_container()


async def test_hot_reload_keeps_v2_and_api_on_one_member_version(
    two_models: Path, settings: Settings, services: Build
) -> None:
    """A pinned member version is kept while loaded: the ensemble's answer does not move with uploads."""
    declare(two_models, "held", {"members": [{"name": "fraud", "version": "1"}, {"name": "fraud_b"}],
                                 "method": "weighted_average", "weights": [1, 0]})  # fmt: skip
    service = await services(replace(settings, models_keep_versions=2))
    row = union_row()[0]
    before = (await service.infer("held", None, [row])).scores[0]
    await service.admin.install_model(ModelRef("fraud", "2"), make_model(bias=2.0))
    assert (await service.infer("held", None, [row])).scores[0] == pytest.approx(before)
