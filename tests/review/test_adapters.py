"""The review through the adapters: the queue path waits longer and publishes it; HTTP reads it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.testclient import TestClient

from bench.llm_server import LlmServer
from shared.adapters.http.app import create_app
from shared.adapters.queue.handler import COMPLETED_QUEUE
from shared.core.holder import ServiceHolder
from shared.core.service import ScoringService
from shared.settings import Settings
from tests.adapters.queue.test_handler import batch_over, message, sent
from tests.conftest import event

Build = Callable[[Settings], Awaitable[ScoringService]]
ALL = {"band_low": 0.0, "band_high": 1.0}


async def test_the_queue_path_waits_longer_and_publishes_the_reviewed_result(
    services: Build, reviewing: Callable[..., Settings], llm: LlmServer
) -> None:
    llm.behaviour.delay_s = 0.3  # past the HTTP wait, inside the queue's
    core = await services(reviewing(**ALL, timeout_ms=50.0, queue_timeout_ms=3000.0))
    batch = batch_over(core)
    handled = await batch.handle([message("q-1"), message("q-2", amount=11.0)])
    assert [h.outcome for h in handled] == ["completed", "completed"]
    published = [orjson.loads(m.body) for m in sent(batch) if m.queue == COMPLETED_QUEUE]
    assert [p["source"] for p in published] == ["llm", "llm"]
    assert all(p["review"] == {"status": "done", "id": p["event_id"]} and "scores" not in p for p in published)


def test_http_answers_pending_then_serves_the_review(reviewing: Callable[..., Settings], llm: LlmServer) -> None:
    llm.behaviour.delay_s = 0.3
    settings = reviewing(**ALL, timeout_ms=20.0)
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as client:
        scored = client.post("/api/score", json=event(event_id="h-1")).json()
        assert scored["review"] == {"status": "pending", "id": "h-1"} and scored["source"] == "model"
        assert client.get("/api/reviews/h-1").json()["status"] == "pending"
        for _ in range(40):
            time.sleep(0.05)
            kept = client.get("/api/reviews/h-1/").json()
            if kept["status"] != "pending":
                break
        assert (
            kept["status"] == "done"
            and kept["event_id"] == "h-1"
            and kept["decision"] in ("approve", "review", "decline")
        )
        missing = client.get("/api/reviews/nope")
        assert missing.status_code == 404 and missing.json()["error"] == "review_not_found"
        assert client.get("/api/stats").json()["reviews"]["called"] == 1


def test_reviews_off_is_a_clear_404(settings: Settings) -> None:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as client:
        r = client.get("/api/reviews/evt-1")
        assert r.status_code == 404 and "AZURE_OPENAI_ENDPOINT" in r.json()["detail"]
