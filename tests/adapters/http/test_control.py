"""The control routes: who may call them (the route table), and what each call leaves behind.

Under the host the control routes take the master key (tests/adapters/test_function_app.py holds
function_app.py to the table); here, through the same app that `make run` serves, each action is
audited with who, what, when and why, and `GET .../rollout` shows the last ones.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.adapters.http.routes import ROUTES
from shared.core.holder import ServiceHolder
from shared.settings import PredictionLogPolicy, Settings
from tests.onnx_models import make_model

CONTROL = {"model_activate", "model_rollout", "model_shadow", "model_canary", "model_promote", "reviews", "outcomes"}


@pytest.fixture
def two_versions(settings: Settings, models_dir: Path, tmp_path: Path) -> Settings:
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(make_model(bias=-20.0))
    log = PredictionLogPolicy(sink="dir", directory=str(tmp_path / "log"), flush_s=0.05)
    return dataclasses.replace(settings, prediction_log=log, models_keep_versions=1)


def serve(settings: Settings, *, hosted: bool = False) -> TestClient:
    return TestClient(create_app(ServiceHolder(lambda: settings), hosted=hosted), raise_server_exceptions=False)


@pytest.fixture
def client(two_versions: Settings) -> Iterator[TestClient]:
    with serve(two_versions) as c:
        yield c


def test_every_route_that_changes_the_fleet_takes_the_master_key() -> None:
    """Outside the data plane, a route that writes (anything but GET) is a control route, and so is
    the rollout view that shows who changed what, and the reviews (the reviewer's working: an oracle
    to whoever is screened, docs/reliability.md)."""
    writers = {r.name for r in ROUTES if r.plane == "admin" and set(r.methods) - {"GET"}}
    assert writers == CONTROL - {"model_rollout", "reviews"}
    assert {r.name for r in ROUTES if r.auth == "admin"} == CONTROL


def test_each_control_action_is_audited_with_who_what_when_and_why(client: TestClient) -> None:
    before = time.time()
    assert client.post("/api/models/fraud/activate", json={"version": "1", "reason": "INC-42 rollback"}).is_success
    assert client.put("/api/models/fraud/canary", json={"version": "2", "weight": 0.25}).is_success
    assert client.request("DELETE", "/api/models/fraud/canary", json={"reason": "declines up"}).is_success
    assert client.put("/api/models/fraud/shadow", json={"version": "2", "reason": "compare"}).is_success
    assert client.delete("/api/models/fraud/shadow").is_success  # no body: no reason, still audited
    assert client.delete("/api/models/fraud/activate").is_success
    actions = client.get("/api/models/fraud/rollout").json()["actions"]
    assert [(a["action"], a["version"], a["reason"]) for a in actions] == [
        ("unpin", None, ""),
        ("unshadow", None, ""),
        ("shadow", "2", "compare"),
        ("abort", "2", "declines up"),
        ("canary", "2", ""),
        ("pin", "1", "INC-42 rollback"),
    ]
    assert actions[4]["weight"] == 0.25 and all(a["model"] == "fraud" for a in actions)
    assert all(a["who"] == "local testclient" for a in actions)  # make run: loopback, no key
    assert all(before <= a["at"] <= time.time() for a in actions)


def test_a_promotion_is_one_action_not_a_pin_and_a_promotion(client: TestClient) -> None:
    assert client.post("/api/models/fraud/activate", json={"version": "1"}).is_success
    assert client.put("/api/models/fraud/canary", json={"version": "2", "weight": 0.5}).is_success
    assert client.post("/api/models/fraud/canary/promote", json={"reason": "green for a day"}).is_success
    actions = client.get("/api/models/fraud/rollout").json()["actions"]
    assert [(a["action"], a["reason"]) for a in actions] == [
        ("promote", "green for a day"),
        ("canary", ""),
        ("pin", ""),
    ]


def test_under_the_host_the_actor_is_the_key_or_the_vouched_principal(two_versions: Settings) -> None:
    with serve(two_versions, hosted=True) as c:
        assert c.post("/api/models/fraud/activate", json={"version": "1"}).is_success
        headers = {"x-ms-client-principal-name": "ops@contoso.com"}
        assert c.delete("/api/models/fraud/activate", headers=headers).is_success
        actions = c.get("/api/models/fraud/rollout").json()["actions"]
    assert [a["who"] for a in actions] == ["principal ops@contoso.com", "admin key"]


def test_the_audit_stream_gets_a_line_per_action(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="shared.audit"):
        assert client.post("/api/models/fraud/activate", json={"version": "1", "reason": "hold"}).is_success
    (line,) = [r for r in caplog.records if r.name == "shared.audit"]
    assert (line.control_action, line.model, line.version, line.reason) == ("pin", "fraud", "1", "hold")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "reason",
    ["forged\nINFO control pin on fraud by admin key", "x" * 201, "\x1b[2Jclear"],
)
def test_a_reason_that_could_forge_the_audit_is_refused_before_anything_changes(
    client: TestClient, reason: str
) -> None:
    r = client.post("/api/models/fraud/activate", json={"version": "1", "reason": reason})
    assert r.status_code == 422 and r.json()["error"] == "invalid_event"
    view = client.get("/api/models/fraud/rollout").json()
    assert view["pinned"] is None and view["actions"] == []


def test_a_forged_principal_header_cannot_break_the_audit_line(two_versions: Settings) -> None:
    with serve(two_versions, hosted=True) as c:
        headers = {"x-ms-client-principal-name": "eve\x7fINFO"}
        assert c.post("/api/models/fraud/activate", json={"version": "1"}, headers=headers).is_success
        (action,) = c.get("/api/models/fraud/rollout").json()["actions"]
    assert action["who"] == "principal eve?INFO"


def test_a_refused_action_leaves_no_audit_entry(client: TestClient) -> None:
    assert client.post("/api/models/fraud/activate", json={"version": "9"}).status_code == 404
    assert client.post("/api/models/fraud/canary/promote").status_code == 409
    assert client.get("/api/models/fraud/rollout").json()["actions"] == []
