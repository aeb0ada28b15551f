"""The anonymous readiness probe, through the Functions adapter (real `azure.functions` types):
ready or not, nothing more; why it is not ready, and what is degraded, needs a key (/api/stats)."""

from __future__ import annotations

import dataclasses
import json

import azure.functions as func

from shared.adapters.functions import FunctionHandlers
from shared.core.holder import ServiceHolder
from shared.settings import Settings


def get(path: str) -> func.HttpRequest:
    return func.HttpRequest(method="GET", url=f"http://localhost{path}", headers={}, body=b"")


async def test_the_anonymous_probe_names_no_internal_failure(settings: Settings) -> None:
    broken = dataclasses.replace(settings, default_model="fraud-internal-name")  # not ready: names a model
    handlers = FunctionHandlers(ServiceHolder(lambda: broken))
    try:
        probe = await handlers.http(get("/api/health/ready"))
        assert probe.status_code == 503
        assert json.loads(probe.get_body()) == {"status": "not_ready", "models": []}
        keyed = json.loads((await handlers.http(get("/api/stats"))).get_body())["readiness"]
        assert keyed["status"] == "not_ready" and "fraud-internal-name" in keyed["detail"]
        assert keyed["models"] == ["fraud"]
    finally:
        await handlers.aclose()


async def test_a_ready_probe_is_ready_and_no_more(settings: Settings) -> None:
    handlers = FunctionHandlers(ServiceHolder(lambda: settings))
    try:
        await handlers.holder.get()
        probe = await handlers.http(get("/api/health/ready"))
        assert probe.status_code == 200 and json.loads(probe.get_body()) == {"status": "ready", "models": []}
    finally:
        await handlers.aclose()
