"""The OpenAPI document (GET /api/openapi.json) against reality: the routes served, and real answers.

The routes come from the app itself (its Starlette routes, and the Functions app's metadata
under the host's routing), never from a hand list. Each case below is a real request to the
real app (tiny ONNX model, real ONNX Runtime) in one of several states; its answer must
have the status the case expects and conform to the served document, and the cases
together must produce every status the document lists (but the two no app answers here).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message

from bench.llm_server import LlmServer
from shared.adapters.http.app import create_app
from shared.adapters.http.openapi import OPENAPI_PATH, document
from shared.core.holder import ServiceHolder
from shared.settings import BatchPolicy, CachePolicy, PredictionLogPolicy, ReviewPolicy, Settings
from tests.adapters.http.openapi_check import answer_problems, operation_of, operations, route_problems
from tests.adapters.test_function_app import host_table
from tests.conftest import REPO, event
from tests.onnx_models import make_model

# NOTE: statuses the document lists that no app answers in these tests, and why.
NOT_ANSWERED_HERE = {
    401: "the Functions host answers it (a missing or wrong function key); the app never does",
    500: "a model run that fails (inference_failed): the models here run",
}
MAX_BODY = 65536
WIDTH = 4  # the tiny model's columns (tests/onnx_models.py)


@dataclass(frozen=True)
class Case:
    """One request to the app in state `app`, and the status it must get."""

    method: str
    path: str
    status: int
    body: bytes | None = None
    content_type: str | None = "application/json"
    app: str = "ready"
    headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False  # the body never arrives (BODY_TIMEOUT_MS)
    scored: bool = True  # False: the app answers 2xx, but its items are not all valid (a batch's)

    def __str__(self) -> str:
        return f"{self.app}:{self.method} {self.path}->{self.status}" + (" stalled" if self.stall else "")


def get(path: str, status: int = 200, app: str = "ready") -> Case:
    return Case("GET", path, status, None, None, app)


def post(path: str, body: object, status: int = 200, **kw: Any) -> Case:
    raw = body if isinstance(body, bytes) or body is None else orjson.dumps(body)
    return Case("POST", path, status, raw, **kw)


def infer_request(rows: int = 2, **extra: Any) -> dict[str, Any]:
    data = [[0.5] * WIDTH for _ in range(rows)]
    return {"id": "r1", "inputs": [{"name": "features", "datatype": "FP32", "shape": [rows, WIDTH], "data": data}]}


def binary_infer() -> tuple[bytes, dict[str, str]]:
    rows = np.full((2, WIDTH), 0.5, dtype=np.float32).tobytes()
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "features",
                    "datatype": "FP32",
                    "shape": [2, WIDTH],
                    "parameters": {"binary_data_size": len(rows)},
                }
            ]
        }
    )
    return head + rows, {"inference-header-content-length": str(len(head))}


def put(path: str, body: object, status: int = 200, **kw: Any) -> Case:
    return replace(post(path, body, status, **kw), method="PUT")


def delete(path: str, status: int = 200, app: str = "ready") -> Case:
    return Case("DELETE", path, status, content_type=None, app=app)


def body_cases(path: str, good: object, method: str = "POST", app: str = "ready") -> list[Case]:
    """The answers every JSON-body route gives to a body it cannot read."""
    small = path.endswith(("activate", "shadow", "canary"))
    over = MAX_BODY * 16 if path.endswith(("batch", "outcomes")) else 1024 if small else MAX_BODY
    cases = [
        post(path, b"{not json", 400),
        post(path, good, 415, content_type="text/plain"),
        post(path, good, 415, content_type=None),
        post(path, b"{" + b" " * over + b"}", 413),
        post(path, good, 408, stall=True),
    ]
    return [replace(c, method=method, app=app) for c in cases]


def note_cases(path: str, method: str = "DELETE", app: str = "ready") -> list[Case]:
    """The answers a control call gives to a `{"reason"}` body it cannot read (the body is optional)."""
    cases = [
        post(path, b"{not json", 400),
        post(path, {"reason": "x"}, 415, content_type="text/plain"),
        post(path, b"{" + b" " * 1024 + b"}", 413),
        post(path, {"reason": "x" * 201}, 422),
        post(path, {"reason": "x"}, 408, stall=True),
    ]
    return [replace(c, method=method, app=app) for c in cases]


BINARY, BINARY_HEADERS = binary_infer()
V2_INFER = "/v2/models/fraud/infer"
V2_VERSIONED = "/v2/models/fraud/versions/1/infer"

OUTCOME = {"event_id": "evt-1", "outcome": "fraud", "source": "chargeback", "learned_at": "2026-12-01T09:00:00Z"}

CASES: list[Case] = [
    get("/api/health/live"),
    get("/api/health/ready"),
    get("/api/health/ready/"),
    get(OPENAPI_PATH),
    get("/api/models"),
    get("/api/stats"),
    get("/api/metrics"),
    get("/api/reviews/evt-1", 404),  # reviews are off here
    get("/api/reviews/rv-1", 200, app="reviewing"),
    post("/api/outcomes", {"outcomes": [OUTCOME, {**OUTCOME, "source": "bank"}]}, app="logging", scored=False),
    post("/api/outcomes", {"outcomes": []}, 422, app="logging"),
    post("/api/outcomes", {"outcomes": [OUTCOME] * 257}, 422, app="logging"),
    post("/api/outcomes", {"outcomes": [OUTCOME]}, 404),  # no prediction log to keep them beside
    post("/api/outcomes", {"outcomes": [OUTCOME]}, 503, app="misconfigured"),
    *body_cases("/api/outcomes", {"outcomes": [OUTCOME]}, app="logging"),
    post("/api/score", event()),
    post("/api/score/", event(event_id="slashed")),
    post("/api/score", event(amount=-1), 422),
    post("/api/score", event(country="NG\n"), 422),
    *body_cases("/api/score", event()),
    post("/api/score/batch", {"events": [event(), event(event_id="e2", amount=3.0)]}),
    post("/api/score/batch", {"events": [event(), {"event_id": "broken"}]}, scored=False),
    post("/api/score/batch", {"events": []}, 422),
    post("/api/score/batch", {"events": [event()] * 257}, 422),
    *body_cases("/api/score/batch", {"events": [event()]}),
    post("/api/models/fraud/score", event()),
    post("/api/models/nope/score", event(), 404),
    post("/api/models/a%2Fb/score", event(), 404),  # a name cannot hold a slash
    post("/api/models/fraud/score", {"event_id": "x"}, 422),
    *body_cases("/api/models/fraud/score", event()),
    post("/api/models/fraud/activate", {"version": "1"}),
    post("/api/models/fraud/activate", {"version": "x"}, 422),
    post("/api/models/fraud/activate", {"version": "9"}, 404),
    post("/api/models/no%20such!/activate", {"version": "1"}, 422),  # not a model name
    *body_cases("/api/models/fraud/activate", {"version": "1"}),
    Case("DELETE", "/api/models/fraud/activate", 200, content_type=None),
    Case("DELETE", "/api/models/nope/activate", 404, content_type=None),
    *note_cases("/api/models/fraud/activate"),
    # rollouts, on an app with two versions (2 serves): in this order, each step the state of the next
    get("/api/models/fraud/rollout", app="versions"),
    get("/api/models/nope/rollout", 404, app="versions"),
    put("/api/models/fraud/shadow", {"version": "1"}, app="versions"),
    put("/api/models/fraud/shadow", {"version": "2"}, 409, app="versions"),  # the live version itself
    put("/api/models/fraud/shadow", {"version": "9"}, 404, app="versions"),
    put("/api/models/fraud/shadow", {"version": "x"}, 422, app="versions"),
    put("/api/models/nope/shadow", {"version": "1"}, 404, app="versions"),
    *body_cases("/api/models/fraud/shadow", {"version": "1"}, "PUT", "versions"),
    delete("/api/models/fraud/shadow", app="versions"),
    delete("/api/models/nope/shadow", 404, app="versions"),
    *note_cases("/api/models/fraud/shadow", app="versions"),
    put("/api/models/fraud/canary", {"version": "2", "weight": 0.5}, 409, app="versions"),  # not pinned
    put("/api/models/fraud/canary", {"version": "2", "weight": 1.5}, 422, app="versions"),
    put("/api/models/fraud/canary", {"version": "9", "weight": 0.5}, 404, app="versions"),
    *body_cases("/api/models/fraud/canary", {"version": "2", "weight": 0.5}, "PUT", "versions"),
    post("/api/models/fraud/canary/promote", None, 409, app="versions", content_type=None),  # no canary
    post("/api/models/fraud/activate", {"version": "1"}, app="versions"),
    put("/api/models/fraud/canary", {"version": "2", "weight": 0.5}, app="versions"),
    put("/api/models/nope/canary", {"version": "2", "weight": 0.5}, 404, app="versions"),
    *note_cases("/api/models/fraud/canary/promote", "POST", "versions"),
    *note_cases("/api/models/fraud/canary", app="versions"),
    post("/api/models/fraud/canary/promote", {"reason": "the candidate held"}, app="versions"),
    post("/api/models/nope/canary/promote", None, 404, app="versions", content_type=None),
    delete("/api/models/fraud/canary", 409, app="versions"),  # promoted: nothing left to abort
    put("/api/models/fraud/canary", {"version": "1", "weight": 0.2}, app="versions"),  # 2 is pinned now
    delete("/api/models/fraud/canary", app="versions"),
    delete("/api/models/nope/canary", 404, app="versions"),
    get("/v2"),
    get("/v2/health/live"),
    get("/v2/health/ready"),
    get("/v2/models/fraud"),
    get("/v2/models/nope", 404),
    get("/v2/models/fraud/versions/1"),
    get("/v2/models/fraud/versions/9", 404),
    get("/v2/models/fraud/ready"),
    get("/v2/models/nope/ready", 400),
    get("/v2/models/a%2Fb/ready", 404),
    get("/v2/models/fraud/versions/1/ready"),
    get("/v2/models/fraud/versions/9/ready", 400),
    get("/v2/models/fraud/versions/a%2Fb/ready", 404),
    *(
        case
        for path in (V2_INFER, V2_VERSIONED)
        for case in (
            post(path, infer_request()),
            post(path, {**infer_request(), "parameters": {"binary_data_output": True}}),
            post(path, BINARY, content_type="application/octet-stream", headers=BINARY_HEADERS),
            post(path, {"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}, 400),
            post(path, b"{not json", 400),
            post(path.replace("fraud", "nope"), infer_request(), 404),
            post(path, b"[" + b" " * MAX_BODY * 16 + b"]", 413),
            post(path, infer_request(), 408, stall=True),
        )
    ),
    post("/v2/models/fraud/versions/9/infer", infer_request(), 404),
    # no models to serve: every route that needs the core says so
    *(
        get(path, 503, app="unready")
        for path in (
            "/api/health/ready",
            "/api/models",
            "/api/stats",
            "/api/reviews/evt-1",
            "/v2",
            "/v2/models/fraud",
            "/v2/models/fraud/versions/1",
            "/v2/models/fraud/ready",
            "/v2/models/fraud/versions/1/ready",
            "/api/models/fraud/rollout",
        )
    ),
    put("/api/models/fraud/shadow", {"version": "1"}, 503, app="unready"),
    put("/api/models/fraud/canary", {"version": "1", "weight": 0.5}, 503, app="unready"),
    post("/api/models/fraud/canary/promote", None, 503, app="unready", content_type=None),
    delete("/api/models/fraud/shadow", 503, app="unready"),
    delete("/api/models/fraud/canary", 503, app="unready"),
    *(
        post(path, body, 503, app="unready")
        for path, body in (
            ("/api/score", event()),
            ("/api/score/batch", {"events": [event()]}),
            ("/api/models/fraud/score", event()),
            ("/api/models/fraud/activate", {"version": "1"}),
            (V2_INFER, infer_request()),
            (V2_VERSIONED, infer_request()),
        )
    ),
    Case("DELETE", "/api/models/fraud/activate", 503, content_type=None, app="unready"),
    # a setting the service cannot run with: 503 naming it, even for the document
    get(OPENAPI_PATH, 503, app="misconfigured"),
    get("/api/metrics", 503, app="misconfigured"),
    get("/api/health/ready", 503, app="misconfigured"),
    get("/api/health/live", 200, app="misconfigured"),
    # DEFAULT_MODEL names no model: the core runs but is not ready; none loads: no core (the protocol's false)
    get("/v2/health/ready", 400, app="no_default"),
    get("/v2/health/ready", 400, app="unready"),
    post("/api/score", event(), 503, app="no_default"),
    get("/api/metrics", 404, app="quiet"),  # TELEMETRY=false
]


# -- the apps ---------------------------------------------------------------------------


class Apps:
    """One running app per state, built on first use; closed at the end of the module."""

    def __init__(self, root: Path, llm: LlmServer) -> None:
        models = root / "models"
        (models / "fraud" / "1").mkdir(parents=True)
        (models / "fraud" / "1" / "model.onnx").write_bytes(make_model())
        versions = root / "versions"
        for version, bias in (("1", 0.0), ("2", -20.0)):
            (versions / "fraud" / version).mkdir(parents=True)
            (versions / "fraud" / version / "model.onnx").write_bytes(make_model(bias=bias))
        (root / "empty").mkdir()
        users = root / "users.json"
        users.write_text('{"u1": {"user_avg_amount_30d": 50.0, "user_txn_count_24h": 3}}')
        base = Settings(
            models_dir=str(models),
            features_file=str(users),
            batch=BatchPolicy(window_ms=5, max_size=8),
            cache=CachePolicy(l1_size=1000),
            gc_gen0_threshold=0,
            body_timeout_ms=300,
            model_poll_s=0,
        )
        review = ReviewPolicy(endpoint=llm.endpoint, api_key="local-test-key", band_low=0.0, band_high=1.0)
        self.settings = {
            "ready": base,
            "reviewing": replace(base, review=review),
            "unready": replace(base, models_dir=str(root / "empty")),
            "no_default": replace(base, default_model="nope"),
            "quiet": replace(base, telemetry=False),
            "versions": replace(base, models_dir=str(versions)),
            "logging": replace(base, prediction_log=PredictionLogPolicy(sink="dir", directory=str(root / "log"))),
        }
        self._clients: dict[str, TestClient] = {}

    def client(self, state: str) -> TestClient:
        if state not in self._clients:
            if state == "misconfigured":
                holder = ServiceHolder(lambda: Settings.from_env({"REDIS_URL": "redis//not-a-url"}))
            else:
                holder = ServiceHolder(lambda: self.settings[state])
            client = TestClient(create_app(holder), raise_server_exceptions=False)
            self._clients[state] = client.__enter__()
            if state == "reviewing":
                _reviewed(client, "rv-1")
        return self._clients[state]

    def send(self, case: Case) -> tuple[int, str | None, bytes]:
        client = self.client(case.app)
        headers = {**case.headers, **({"content-type": case.content_type} if case.content_type else {})}
        if case.stall:
            return client.portal.call(_stalled, client.app, case.method, case.path, headers)
        r = client.request(case.method, case.path, content=case.body, headers=headers)
        return r.status_code, r.headers.get("content-type"), r.content

    def close(self) -> None:
        for client in self._clients.values():
            client.__exit__(None, None, None)


def _reviewed(client: TestClient, event_id: str) -> None:
    client.post("/api/score", json=event(event_id=event_id))
    for _ in range(100):
        if client.get(f"/api/reviews/{event_id}").json().get("status") not in (None, "pending"):
            return
        time.sleep(0.05)
    raise AssertionError("the review never finished")


async def _stalled(app: ASGIApp, method: str, path: str, headers: dict[str, str]) -> tuple[int, str | None, bytes]:
    """The app's answer to a request whose body never comes."""
    sent: list[Message] = []

    async def receive() -> Message:
        await anyio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    with anyio.fail_after(10):
        await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    found = dict(start["headers"]).get(b"content-type")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], found.decode() if found else None, body


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apps]:
    with LlmServer() as llm:
        built = Apps(tmp_path_factory.mktemp("openapi"), llm)
        try:
            yield built
        finally:
            built.close()


@pytest.fixture(scope="module")
def served(apps: Apps) -> dict[str, Any]:
    """The document as the app serves it."""
    r = apps.client("ready").get(OPENAPI_PATH)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    found: dict[str, Any] = r.json()
    return found


# -- the document itself ------------------------------------------------------------------


def test_the_served_document_is_valid_openapi_3_1(served: dict[str, Any]) -> None:
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    validate(served)
    assert served["openapi"].startswith("3.1.")
    assert served == json.loads(orjson.dumps(document(256)))  # the settings' limits: MAX_BATCH_ITEMS
    broken = copy.deepcopy(served)
    broken["paths"]["/api/score"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] = {"type": 7}
    with pytest.raises(OpenAPIValidationError):
        validate(broken)


def test_every_route_served_is_documented_and_every_documented_route_is_served(
    apps: Apps, served: dict[str, Any]
) -> None:
    app = create_app(ServiceHolder(lambda: apps.settings["ready"]))
    assert len(app.routes) >= 18 and len(host_table()) >= 18  # a sanity floor: the routes were found
    assert route_problems(served, app.routes, host_table()) == []


def test_the_route_check_catches_a_document_that_drifts(apps: Apps, served: dict[str, Any]) -> None:
    """Mutations: a route dropped, a method dropped, a route that is not served, a keyed route made anonymous."""
    routes, table = create_app(ServiceHolder(lambda: apps.settings["ready"])).routes, host_table()

    def problems(mutate: Any) -> list[str]:
        doc = copy.deepcopy(served)
        mutate(doc)
        return route_problems(doc, routes, table)

    dropped = problems(lambda d: d["paths"].pop("/api/stats"))
    assert "GET /api/stats is served by the app but not in the document" in dropped
    assert "GET api/stats (function stats) is not in the document" in dropped
    assert any(
        "DELETE /api/models/{name}/activate" in p
        for p in problems(lambda d: d["paths"]["/api/models/{name}/activate"].pop("delete"))
    )
    ghost = problems(lambda d: d["paths"].update({"/api/nope": {"get": {"responses": {}}}}))
    assert "GET /api/nope is in the document but the app does not serve it" in ghost
    assert any("no function answers it" in p for p in ghost)
    anonymous = problems(lambda d: d["paths"]["/api/score"]["post"].update({"security": []}))
    assert anonymous == ["POST /api/score: the document says no key, the function score is function"]
    keyed = problems(lambda d: d["paths"]["/api/health/live"]["get"].pop("security"))
    assert keyed == ["GET /api/health/live: the document says a function key, the function health is anonymous"]


# -- real answers ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_real_answers_conform_to_the_document(apps: Apps, served: dict[str, Any], case: Case) -> None:
    status, content_type, body = apps.send(case)
    assert status == case.status, body[:500]
    request_body = case.body if case.scored else None
    assert answer_problems(
        served, case.method, case.path, status, content_type, body,
        request_body=request_body, request_type=case.content_type or "",
    ) == []  # fmt: skip
    if status >= 400 and content_type == "application/json":
        assert "error" in orjson.loads(body) or case.path.endswith("ready")  # V2 readiness: {"ready": false}


def test_the_cases_give_every_documented_status(served: dict[str, Any]) -> None:
    """Each status the document lists is one the app really gives (but the two it cannot here)."""
    given = set()
    for case in CASES:
        found = operation_of(served, case.method, case.path)
        assert found is not None, f"{case}: no operation"
        given.add((case.method, found[0], case.status))
    missing = [
        f"{method} {template} {status}"
        for template, method, op in operations(served)
        for status in map(int, op["responses"])
        if (method, template, status) not in given and status not in NOT_ANSWERED_HERE
    ]
    assert missing == []


def test_the_answer_check_catches_a_document_that_drifts(apps: Apps, served: dict[str, Any]) -> None:
    """Mutations: a response schema changed, a status dropped, an error shape or content-type changed."""
    scored = apps.send(post("/api/score", event(event_id="mutant")))
    invalid = apps.send(post("/api/score", event(amount=-1), 422))
    metrics = apps.send(get("/api/metrics"))
    v2_missing = apps.send(get("/v2/models/nope", 404))

    def problems(mutate: Any, method: str, path: str, answer: tuple[int, str | None, bytes]) -> list[str]:
        doc = copy.deepcopy(served)
        mutate(doc)
        return answer_problems(doc, method, path, *answer)

    schemas = "components", "schemas"
    assert problems(lambda d: None, "POST", "/api/score", scored) == []
    assert problems(
        lambda d: d[schemas[0]][schemas[1]]["Scored"]["properties"].update(risk_score={"type": "string"}),
        "POST",
        "/api/score",
        scored,
    )
    assert problems(
        lambda d: d[schemas[0]][schemas[1]]["Scored"]["properties"].pop("timings_ms"), "POST", "/api/score", scored
    )
    assert problems(lambda d: d["paths"]["/api/score"]["post"]["responses"].pop("422"), "POST", "/api/score", invalid)
    assert problems(
        lambda d: d[schemas[0]][schemas[1]]["ErrorBody"]["properties"].pop("detail"), "POST", "/api/score", invalid
    )
    codes = lambda d: d["paths"]["/api/score"]["post"]["responses"]["422"]["content"]["application/json"]["schema"]  # noqa: E731
    assert problems(
        lambda d: codes(d)["properties"]["error"].update(enum=["too_many_items"]), "POST", "/api/score", invalid
    )
    content = lambda d: d["paths"]["/api/metrics"]["get"]["responses"]["200"]["content"]  # noqa: E731
    assert problems(
        lambda d: content(d).update({"application/json": content(d).pop("text/plain")}), "GET", "/api/metrics", metrics
    )
    assert problems(
        lambda d: d[schemas[0]][schemas[1]]["V2Error"].update(required=["error", "code"]),
        "GET",
        "/v2/models/nope",
        v2_missing,
    )
    event_props = lambda d: d[schemas[0]][schemas[1]]["PaymentEvent"]  # noqa: E731
    accepted = apps.send(post("/api/score", event(event_id="taken")))
    taken = orjson.dumps(event(event_id="taken"))
    assert answer_problems(served, "POST", "/api/score", *accepted, request_body=taken) == []
    doc = copy.deepcopy(served)
    event_props(doc)["properties"]["channel"]["enum"] = ["app", "pos"]  # the document refuses what the app takes
    assert answer_problems(doc, "POST", "/api/score", *accepted, request_body=taken)


def test_the_request_bodies_are_the_decoders_own_schemas(served: dict[str, Any]) -> None:
    """What the document says `/api/score` takes is what msgspec decodes: no second copy to drift."""
    import msgspec

    from shared.domain.events import PaymentEvent

    ours = served["components"]["schemas"]["PaymentEvent"]
    _, components = msgspec.json.schema_components([PaymentEvent])
    theirs = components["PaymentEvent"]
    assert ours["required"] == theirs["required"] and set(ours["properties"]) == set(theirs["properties"])
    assert ours["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"


def test_the_response_bodies_are_the_answers_own_schemas(served: dict[str, Any]) -> None:
    """What the document says `/api/score` answers is the struct the adapters encode: no second copy to drift;
    a field the answer always writes is required, one it may leave out (UNSET, omitted default) is not."""
    import msgspec

    from shared.domain.answers import REF, Readiness, Scored

    ours = served["components"]["schemas"]
    _, theirs = msgspec.json.schema_components([Scored, Readiness], ref_template=REF)
    assert ours["Scored"]["properties"] == theirs["Scored"]["properties"]
    assert "scores" not in ours["Scored"]["required"] and "review" not in ours["Scored"]["required"]
    assert ours["Readiness"]["required"] == ["status", "models"]  # detail, degraded: only when not empty
    assert ours["CacheStats"]["required"] == ["l1_hits", "l2_hits", "misses"]  # defaults, but always written


def test_the_document_is_built_on_its_first_request_only() -> None:
    """Not on the Functions import path, not by the score lane."""
    code = """
import json, sys
from starlette.testclient import TestClient
import function_app
from shared.core.holder import ServiceHolder
from shared.adapters.http.app import create_app
from shared.settings import Settings
before = "shared.adapters.http.openapi" in sys.modules
settings = Settings(features_file=None)
with TestClient(create_app(ServiceHolder(lambda: settings))) as client:
    client.post("/api/score", json={"event_id": "e", "user_id": "u", "amount": 1, "currency": "USD",
        "merchant_id": "m", "merchant_category": "1", "country": "NG", "channel": "web", "timestamp": "2026-01-01T00:00:00Z"})
    scored = "shared.adapters.http.openapi" in sys.modules
    client.get("/api/openapi.json")
    print(json.dumps([before, scored, "shared.adapters.http.openapi" in sys.modules]))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, False, True]


def test_every_route_of_the_table_is_an_operation_of_the_document(served: dict[str, Any]) -> None:
    """Each operation of the route table is in the document under its path, method and operationId,
    and every error code the document names is a class's of shared/errors.py (or the router's 404)."""
    from shared import errors
    from shared.adapters.http.routes import ROUTES

    documented = {(path, method, op["operationId"]) for path, method, op in operations(served)}
    table = set()
    for spec in ROUTES:
        for op in spec.ops:
            path = spec.path.replace("{probe}", op.probe)
            table.add((path, op.method, op.name or "_".join(filter(None, (spec.name, op.probe)))))
    assert table == documented
    tree = {c.code for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.ScoringError)}
    named = {
        code
        for _, _, op in operations(served)
        for answer in op["responses"].values()
        for code in answer.get("content", {}).get("application/json", {}).get("schema", {})
        .get("properties", {}).get("error", {}).get("enum", [])
    }  # fmt: skip
    assert named - tree == {"not_found"} and "overloaded" in named


def test_the_document_fails_on_a_route_without_an_operation_or_an_error_outside_the_tree() -> None:
    """Mutations of the table: a route with no operation, an error class that is not the tree's,
    two operations on one method; the table's answers, errors and auth are what the document says."""
    from shared.adapters.http.openapi import _paths
    from shared.adapters.http.routes import ROUTES, Op, RouteSpec, route
    from shared.domain.answers import Stats
    from shared.errors import Overloaded, RolloutConflict

    class Homemade(RolloutConflict):  # a subclass of the tree's, defined outside shared/errors.py
        code = "homemade"

    def mutated(name: str, **change: Any) -> tuple[RouteSpec, ...]:
        return tuple(r._replace(**change) if r.name == name else r for r in ROUTES)

    stats, score = route("stats"), route("score").ops[0]
    paths = _paths(256)
    assert [p for p in paths if "{probe}" not in p] == list(paths)  # a probe route is its two probes
    assert paths["/api/health/live"]["get"]["security"] == [] and "401" in paths["/api/stats"]["get"]["responses"]
    with pytest.raises(LookupError, match=r"route stats .* has no operation"):
        _paths(256, mutated("stats", ops=()))
    with pytest.raises(LookupError, match="Homemade is not a class of the error tree"):
        _paths(256, mutated("stats", ops=(stats.ops[0]._replace(errors=(Homemade,)),)))
    with pytest.raises(LookupError, match="a second GET /api/stats"):
        _paths(256, mutated("stats", ops=stats.ops * 2))
    ghost = RouteSpec("ghost", "/api/ghost", "function", "admin", "operations", (Op("GET", "not served", Stats),))
    assert _paths(256, (*ROUTES, ghost))["/api/ghost"]["get"]["operationId"] == "ghost"
    shed = _paths(256)["/api/score"]["post"]["responses"]["503"]
    assert "overloaded" in shed["content"]["application/json"]["schema"]["properties"]["error"]["enum"]
    assert "headers" in shed  # Retry-After: Overloaded says when to come back
    unshed = tuple(e for e in score.errors if e is not Overloaded and e.retry_after_s is None)
    calm = _paths(256, mutated("score", ops=(score._replace(errors=unshed),)))
    assert "headers" not in calm["/api/score"]["post"]["responses"]["503"]
    keyed = _paths(256, mutated("health", auth="function"))
    assert "security" not in keyed["/api/health/live"]["get"]
