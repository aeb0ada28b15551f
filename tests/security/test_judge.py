"""A scoring key never chooses its judge: a data-plane call names a model's live version or none."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.core.names import ServedNames
from shared.settings import Settings
from tests.onnx_models import make_model

ROWS = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 4], "data": [[9.0, 1.0, 0.0, 9.0]]}]}


@pytest.fixture
def client(settings: Settings, models_dir: Path) -> Iterator[TestClient]:
    """fraud/1 live; fraud/2 a loaded candidate that would approve everything (as in Azure: no auto promote)."""
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(make_model(bias=-30.0))
    candidates = replace(settings, auto_promote=False)
    with TestClient(create_app(ServiceHolder(lambda: candidates)), raise_server_exceptions=False) as c:
        yield c


def test_a_scoring_call_naming_a_candidate_is_refused(client: TestClient) -> None:
    refused = client.post("/v2/models/fraud/versions/2/infer", json=ROWS)
    assert refused.status_code == 404 and "is not the live version of 'fraud' (1)" in refused.json()["error"]
    assert client.get("/v2/models/fraud/versions/2/ready").status_code == 400
    assert client.get("/v2/models/fraud/versions/2").status_code == 404


def test_the_live_version_may_be_named(client: TestClient) -> None:
    named = client.post("/v2/models/fraud/versions/1/infer", json=ROWS)
    assert named.status_code == 200 and named.json()["model_version"] == "1"


def test_without_the_rule_the_candidate_would_judge(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation check: a lookup that takes any loaded version lets the caller pick the lenient one."""
    monkeypatch.setattr(ServedNames, "get", lambda self, name, version=None: self._registry.active(name, version))
    lenient = client.post("/v2/models/fraud/versions/2/infer", json=ROWS)
    assert lenient.status_code == 200 and lenient.json()["model_version"] == "2"
