"""The fast lane: the worker process serves HTTP itself on FAST_LANE_PORT, beside the host's route."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import azure.functions as func
import httpx

from shared.build import ServiceHolder
from shared.fast_lane import fast_lane
from shared.http import create_app
from shared.settings import Settings
from shared.triggers import FunctionHandlers
from tests.conftest import closed_port, event, port_frees


def handlers_with_lane(settings: Settings) -> FunctionHandlers:
    """Wired as shared/triggers.py wires the Functions app (loopback here)."""
    holder = ServiceHolder(lambda: settings, on_built=[fast_lane("127.0.0.1", lambda: create_app(holder))])
    return FunctionHandlers(holder)


async def test_the_lane_serves_the_same_answers_as_the_hosts_route(settings: Settings) -> None:
    port = closed_port()
    handlers = handlers_with_lane(replace(settings, fast_lane_port=port))
    service = await handlers.holder.get()
    try:
        assert "fast_lane" in service.background.running
        body = json.dumps(event(event_id="lane-1")).encode()
        hosted = await handlers.http(
            func.HttpRequest("POST", "http://host/api/score", headers={"content-type": "application/json"}, body=body)
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(50):  # the server starts with the core's jobs: give it a moment
                try:
                    ready = await client.get("/api/health/ready")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            assert ready.status_code == 200
            direct = await client.post("/api/score", content=body, headers={"content-type": "application/json"})
            bad = await client.post("/api/score", content=b"{", headers={"content-type": "application/json"})
        assert direct.status_code == hosted.status_code == 200
        a, b = json.loads(hosted.get_body()), direct.json()
        assert (a["event_id"], a["risk_score"], a["decision"]) == (b["event_id"], b["risk_score"], b["decision"])
        assert bad.status_code == 400 and bad.json()["error"] == "malformed_json"
    finally:
        await handlers.holder.aclose()
    assert await port_frees(port), "the lane still holds its port after the core closed"


async def test_no_port_no_lane(settings: Settings) -> None:
    handlers = handlers_with_lane(settings)
    service = await handlers.holder.get()
    assert service.settings.fast_lane_port == 0 and "fast_lane" not in service.background.running
    await handlers.holder.aclose()


def test_the_functions_app_is_wired_with_the_lane() -> None:
    import shared.triggers

    hooks = shared.triggers.handlers.holder._on_built
    assert any(getattr(h, "__qualname__", "").startswith("fast_lane") for h in hooks)


async def test_a_taken_port_fails_the_job_not_the_process(settings: Settings) -> None:
    """uvicorn exits the process when it cannot bind; under the Functions worker that is the worker."""
    import socket

    from shared.fast_lane import serve_http

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        app = create_app(ServiceHolder(lambda: settings))
        try:
            await serve_http(app, "127.0.0.1", port, header_timeout_s=1.0)
        except OSError:
            pass  # the supervisor logs it and retries later
        else:
            raise AssertionError("serving on a taken port did not fail")


async def test_the_lane_serves_the_data_plane_only(settings: Settings) -> None:
    port = closed_port()
    handlers = handlers_with_lane(replace(settings, fast_lane_port=port))
    await handlers.holder.get()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(50):
                try:
                    await client.get("/api/health/live")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            assert (await client.get("/v2/models/fraud")).status_code == 200
            assert (await client.get("/api/health/ready/")).status_code == 200
            for method, path in [
                ("GET", "/api/stats"),
                ("GET", "/api/metrics"),
                ("GET", "/api/models"),
                ("POST", "/api/models/fraud/activate"),
                ("DELETE", "/api/models/fraud/activate"),
                ("GET", "/api/reviews/evt-1"),
            ]:
                r = await client.request(method, path, json={"version": "1"} if method == "POST" else None)
                assert r.status_code == 404 and r.json()["error"] == "not_found", (method, path)
    finally:
        await handlers.holder.aclose()


def test_the_lanes_connections_send_without_delay() -> None:
    """Accepted connections carry TCP_NODELAY: the worker's plain asyncio loop does not set it on them."""
    import socket

    from shared.fast_lane import listening_socket

    server = listening_socket("127.0.0.1", 0)
    try:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        server.close()
