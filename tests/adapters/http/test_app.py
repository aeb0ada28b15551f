"""The HTTP API through the ASGI app (the same app Functions and `make run` serve)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests.conftest import event


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as c:
        yield c


def test_score_answers_with_every_field(client: TestClient) -> None:
    r = client.post("/api/score", json=event())
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["event_id"] == "evt-1" and body["model"] == "fraud" and body["model_version"] == "1"
    assert body["source"] == "model" and body["decision"] in ("approve", "review", "decline")
    assert body["timings_ms"]["parse"] > 0 and body["timings_ms"]["total"] >= body["timings_ms"]["parse"]


def test_named_model_route(client: TestClient) -> None:
    assert client.post("/api/models/fraud/score", json=event()).json()["model"] == "fraud"
    r = client.post("/api/models/nope/score", json=event())
    assert r.status_code == 404 and r.json()["error"] == "model_not_found"


@pytest.mark.parametrize(
    ("content", "headers", "status", "code"),
    [
        (b"{not json", {"content-type": "application/json"}, 400, "malformed_json"),
        (json.dumps(event(amount=-1)).encode(), {"content-type": "application/json"}, 422, "invalid_event"),
        (json.dumps(event(amount="ten")).encode(), {"content-type": "application/json"}, 422, "invalid_event"),
        (
            json.dumps({k: v for k, v in event().items() if k != "user_id"}).encode(),
            {"content-type": "application/json"},
            422,
            "invalid_event",
        ),
        (b'{"amount": 1e999}', {"content-type": "application/json"}, 422, "invalid_event"),
        (json.dumps(event()).encode(), {"content-type": "text/plain"}, 415, "unsupported_media_type"),
        (json.dumps(event()).encode(), {}, 415, "unsupported_media_type"),
        (b"{" + b" " * 70_000 + b"}", {"content-type": "application/json"}, 413, "payload_too_large"),
    ],
)
def test_bad_input_is_a_clear_4xx(
    client: TestClient, content: bytes, headers: dict[str, str], status: int, code: str
) -> None:
    r = client.post("/api/score", content=content, headers=headers)
    assert r.status_code == status
    assert r.json()["error"] == code and r.json()["detail"]
    assert "Traceback" not in r.text


def test_oversized_body_without_content_length_is_cut_off(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"pad": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    r = client.post("/api/score", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_batch_answers_in_order_with_per_item_errors(client: TestClient) -> None:
    events = [event(event_id=f"e{i}", amount=float(i)) for i in range(5)]
    events[2] = {"event_id": "broken"}
    r = client.post("/api/score/batch", json={"events": events})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x.get("event_id") for x in results] == ["e0", "e1", None, "e3", "e4"]
    assert results[2]["error"] == "invalid_event" and results[2]["index"] == 2


def test_batch_limits(client: TestClient) -> None:
    r = client.post("/api/score/batch", json={"events": [event()] * 257})
    assert r.status_code == 422 and r.json()["error"] == "too_many_items"
    assert client.post("/api/score/batch", json={"events": []}).status_code == 422
    assert client.post("/api/score/batch", json=[event()]).status_code == 422


def test_health_and_models(client: TestClient) -> None:
    assert client.get("/api/health/live").status_code == 200
    assert client.get("/api/health/ready").json()["status"] == "ready"
    [model] = client.get("/api/models").json()["models"]
    assert model["name"] == "fraud" and model["active_version"] == "1" and model["versions"] == ["1"]
    assert model["providers"] == ["CPUExecutionProvider"] and model["loaded_at"] > 0
    assert set(client.get("/api/stats").json()) >= {"predictions", "features", "redis"}


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    r = client.get("/api/nope")
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = client.get("/api/score")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"


def test_ready_is_503_until_models_load(tmp_path: Path) -> None:
    empty = Settings(models_dir=str(tmp_path), features_file=None)
    with TestClient(create_app(ServiceHolder(lambda: empty)), raise_server_exceptions=False) as c:
        r = c.get("/api/health/ready")
        assert r.status_code == 503 and r.json()["status"] == "not_ready"
        assert "no models found" in r.json()["detail"]
        assert c.get("/api/health/live").status_code == 200
        r = c.post("/api/score", json=event())
        assert r.status_code == 503 and r.json()["error"] == "not_ready"


@pytest.mark.parametrize(
    "content",
    [b'{"event_id": "\xff\xfe"}', b'{"x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"],
)
def test_unreadable_json_is_400_not_500(client: TestClient, content: bytes) -> None:
    r = client.post("/api/score", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "malformed_json"
    r = client.post(
        "/api/score/batch", content=b'{"events": [' + content + b"]}", headers={"content-type": "application/json"}
    )
    assert r.status_code in (200, 400)
    if r.status_code == 200:
        assert r.json()["results"][0]["error"] == "malformed_json"


def test_bad_settings_show_on_readiness_not_at_import() -> None:
    def bad() -> Settings:
        return Settings.from_env({"BATCH_MAX_SIZE": "zero"})

    app = create_app(ServiceHolder(bad))  # creating the app reads nothing
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/api/health/ready")
        assert r.status_code == 503 and "invalid settings" in r.json()["detail"]
        r = c.post("/api/score", json=event())
        assert r.status_code == 503 and r.json()["error"] == "not_ready"


async def test_an_unexpected_error_is_a_json_500_that_goes_no_further() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from shared.adapters.http.app import CatchAll

    async def boom(request: object) -> None:
        raise RuntimeError("bug")

    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    app = CatchAll(Starlette(routes=[Route("/x", boom)]))
    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b"", "root_path": ""}
    await app(scope, receive, send)  # no exception escapes (as Functions' AsgiMiddleware needs)
    assert sent[0]["status"] == 500
    assert b"Traceback" not in sent[-1]["body"]  # type: ignore[operator]


async def call_with_body(app: ASGIApp, messages: list[Message], path: str = "/api/score") -> tuple[int, Any]:
    """POST through the ASGI interface, receiving `messages` and then nothing more, ever."""
    pending = list(messages)
    sent: list[Message] = []

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        await asyncio.Event().wait()  # a client that stalls
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"100")]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b"", "root_path": ""}
    await asyncio.wait_for(app(scope, receive, send), 5)
    return sent[0]["status"], json.loads(sent[-1]["body"])


async def test_stalled_body_is_a_json_408(settings: Settings) -> None:
    quick = dataclasses.replace(settings, body_timeout_ms=100)
    app = create_app(ServiceHolder(lambda: quick))
    for path in ("/api/score", "/api/score/batch"):
        started = time.monotonic()
        status, body = await call_with_body(app, [{"type": "http.request", "body": b"{", "more_body": True}], path)
        assert status == 408 and body["error"] == "body_timeout" and body["detail"]
        assert time.monotonic() - started < 2
        status, body = await call_with_body(app, [], path)  # headers, then no body at all
        assert status == 408 and body["error"] == "body_timeout"


async def test_body_cut_off_is_a_json_400_not_500(settings: Settings) -> None:
    """A client that leaves mid-body gets a JSON 400, never a 500."""
    app = create_app(ServiceHolder(lambda: settings))
    for messages in (
        [{"type": "http.disconnect"}],
        [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}],
    ):
        status, body = await call_with_body(app, messages)
        assert status == 400 and body["error"] == "bad_request" and body["detail"]


def test_trailing_slash_is_served_not_redirected(client: TestClient) -> None:
    """The Functions host routes `score/` as `score`; no redirect is built from the client's Host header."""
    r = client.post("/api/score/", json=event(), headers={"host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 200 and r.json()["event_id"] == "evt-1" and "location" not in r.headers
    assert client.post("/api/models/fraud/score/", json=event()).json()["model"] == "fraud"
    assert client.post("/api/score/batch/", json={"events": [event()]}).status_code == 200
    for path in ("/api/models/", "/api/stats/", "/api/health/live/", "/api/health/ready/"):
        assert client.get(path).status_code == 200, path
    r = client.get("/api/score/")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    for path in ("/api/score//", "/api/health/live//", "/api/nope/"):
        r = client.post(path, json=event(), follow_redirects=False) if "score" in path else client.get(path)
        assert r.status_code == 404 and r.json()["error"] == "not_found" and "location" not in r.headers, path


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (json.dumps(event()).encode(), {"content-type": "application/json"}),
        (b"{not json", {"content-type": "application/json"}),
        (json.dumps(event(amount=-1)).encode(), {"content-type": "application/json"}),
        (json.dumps(event()).encode(), {"content-type": "text/plain"}),
        (b"{" + b" " * 70_000 + b"}", {"content-type": "application/json"}),
    ],
    ids=["valid", "malformed", "invalid", "media-type", "too-large"],
)
def test_the_scoring_lane_answers_as_the_framework_route_does(
    client: TestClient, content: bytes, headers: dict[str, str]
) -> None:
    """POST /api/score is served ahead of the router (shared/adapters/http/app.py `score_lane`); the named-model
    route is the same endpoint through Starlette: the two must give the same answers."""
    lane = client.post("/api/score", content=content, headers=headers)
    routed = client.post("/api/models/fraud/score", content=content, headers=headers)
    assert lane.status_code == routed.status_code
    assert lane.headers["content-type"] == routed.headers["content-type"] == "application/json"
    strip = lambda body: {k: v for k, v in body.items() if k not in ("timings_ms", "source")}  # noqa: E731 (2nd: a cache hit)
    assert strip(lane.json()) == strip(routed.json())
