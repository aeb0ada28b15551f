"""An HTTP score, a cache hit and a rejected input, as the in-memory reader and span exporter see them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from shared.telemetry.catalogue import prometheus_names
from shared.telemetry.logs import JsonFormatter
from tests.conftest import event
from tests.telemetry.conftest import Observed, points, total

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ROUTE = {"http.route": "/api/score", "http.request.method": "POST"}


@pytest.fixture
def client(settings: Settings, observed: Observed) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as c:
        yield c


def test_a_score_records_its_request_and_every_stage(client: TestClient, observed: Observed) -> None:
    reader = observed.reader
    before = total(reader, "http.server.request.duration", **ROUTE, **{"http.response.status_code": "200"})
    stages = {s: total(reader, "scoring.stage.duration", **{"scoring.stage": s}) for s in ("parse", "inference")}
    assert client.post("/api/score", json=event(event_id="t-1", amount=321.0)).status_code == 200
    after = total(reader, "http.server.request.duration", **ROUTE, **{"http.response.status_code": "200"})
    assert after == before + 1
    for stage, count in stages.items():
        assert total(reader, "scoring.stage.duration", **{"scoring.stage": stage}) == count + 1
    assert total(reader, "scoring.batch.size", **{"scoring.model": "fraud"}) >= 1
    assert total(reader, "scoring.model.active", **{"scoring.model": "fraud", "scoring.model.version": "1"}) == 1
    [(_, histogram)] = [
        (a, p)
        for a, p in points(reader, "http.server.request.duration")
        if a.get("http.response.status_code") == "200"
        and a.get("http.route") == "/api/score"
        and a.get("scoring.source") == "model"
    ]
    assert histogram.sum > 0 and list(histogram.explicit_bounds)[:2] == [0.0005, 0.001]


def test_a_cache_hit_is_counted_by_tier_and_labelled_on_the_request(client: TestClient, observed: Observed) -> None:
    body = event(event_id="t-cache", amount=77.0)
    client.post("/api/score", json=body)
    l1 = total(observed.reader, "scoring.cache.lookups", **{"scoring.cache": "predictions", "scoring.cache.tier": "l1"})
    hits = total(observed.reader, "http.server.request.duration", **ROUTE, **{"scoring.source": "cache"})
    assert client.post("/api/score", json=body).json()["source"] == "cache"
    reader = observed.reader
    assert (
        total(reader, "scoring.cache.lookups", **{"scoring.cache": "predictions", "scoring.cache.tier": "l1"}) == l1 + 1
    )
    assert total(reader, "http.server.request.duration", **ROUTE, **{"scoring.source": "cache"}) == hits + 1


def test_the_trace_continues_from_the_callers_traceparent_with_a_span_per_stage(
    client: TestClient, observed: Observed
) -> None:
    observed.spans.clear()
    assert client.post("/api/score", json=event(event_id="t-trace"), headers={"traceparent": PARENT}).status_code == 200
    spans = observed.spans.get_finished_spans()
    [root] = [s for s in spans if s.name == "POST /api/score"]
    assert f"{root.context.trace_id:032x}" == PARENT.split("-")[1]
    assert root.parent is not None and f"{root.parent.span_id:016x}" == PARENT.split("-")[2]
    assert root.attributes is not None and root.attributes["http.response.status_code"] == 200
    assert root.attributes["scoring.model"] == "fraud" and root.attributes["http.route"] == "/api/score"
    children = {s.name for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id}
    assert {"parse", "features", "inference"} <= children


def test_an_unsampled_parent_makes_no_span(client: TestClient, observed: Observed) -> None:
    observed.spans.clear()
    client.post("/api/score", json=event(event_id="t-unsampled"), headers={"traceparent": PARENT[:-2] + "00"})
    assert observed.spans.get_finished_spans() == ()


def test_metrics_parse_as_prometheus_text_and_count_the_requests_made(client: TestClient) -> None:
    def scored() -> float:
        text = client.get("/api/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                assert sample.name in prometheus_names(), f"{sample.name} is not in the catalogue"
        return sum(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "http_server_request_duration_seconds_count"
            and s.labels.get("http_route") == "/api/score"
            and s.labels.get("http_response_status_code") == "200"
        )

    before = scored()
    for i in range(7):
        client.post("/api/score", json=event(event_id=f"t-prom-{i}", amount=10.0 + i))
    client.post("/api/score", content=b"{bad", headers={"content-type": "application/json"})  # a 400: not counted
    assert scored() == before + 7
    assert client.get("/api/metrics").headers["content-type"].startswith("text/plain; version=0.0.4")


def test_metrics_with_telemetry_off_is_404(settings: Settings) -> None:
    import dataclasses

    off = dataclasses.replace(settings, telemetry=False)
    with TestClient(create_app(ServiceHolder(lambda: off)), raise_server_exceptions=False) as c:
        r = c.get("/api/metrics")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_each_rejected_input_logs_one_structured_line_without_personal_data(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    from shared.telemetry.logs import rejections

    rejections.configure(100)
    with caplog.at_level(logging.WARNING, logger="shared.rejections"):
        client.post("/api/score", json=event(user_id="alice@example.com", amount=-5, note="my secret note"))
    [record] = [r for r in caplog.records if r.name == "shared.rejections"]
    line = json.loads(JsonFormatter().format(record))
    assert line["event"] == "input_rejected" and line["reason"] == "invalid_event" and line["where"] == "http"
    assert line["route"] == "/api/score" and line["status"] == 422
    assert "alice" not in json.dumps(line) and "secret" not in json.dumps(line)


def test_a_flood_of_rejections_is_rate_limited_and_the_suppressed_are_counted(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    import time

    from shared.telemetry.logs import rejections

    rejections.configure(5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="shared.rejections"):
        for _ in range(200):
            client.post("/api/score", content=b"{bad", headers={"content-type": "application/json"})
        elapsed = time.monotonic() - started
        rejections._tokens = 1.0  # NOTE: as if the next second had come
        client.post("/api/score", content=b"{bad", headers={"content-type": "application/json"})
    lines = [r for r in caplog.records if r.name == "shared.rejections"]
    assert len(lines) <= 5 + 5 * elapsed + 2, f"{len(lines)} lines for 200 rejections in {elapsed:.1f} s at 5/s"
    assert len(lines) < 100
    assert len(lines) + sum(getattr(r, "suppressed", 0) for r in lines) == 201, "a rejection went unaccounted"


def test_a_span_sampled_out_by_a_provider_we_did_not_configure_just_ends(observed: Observed) -> None:
    """Under the worker's own azure-monitor setup our spans can be non-recording: no name to read."""
    import time
    from types import SimpleNamespace

    from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan

    from shared.telemetry.asgi import Measured

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    measured = Measured(app, lambda: True, hosted=True)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/score",
        "headers": [],
        "route": SimpleNamespace(path="/api/score"),
    }
    measured.end(scope, 200, time.perf_counter(), NonRecordingSpan(INVALID_SPAN_CONTEXT))  # raises nothing
