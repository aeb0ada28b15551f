"""An LLM review as the in-memory reader and span exporter see it: calls, tokens, failures, breaker, stage."""

from __future__ import annotations

from collections.abc import Callable

from starlette.testclient import TestClient

from bench.llm_server import LlmServer
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests.conftest import event
from tests.telemetry.conftest import Observed, observed, total

__all__ = ["observed"]  # NOTE: the fixture, shared with tests/telemetry

ALL = {"band_low": 0.0, "band_high": 1.0}
MODEL = {"gen_ai.request.model": "review"}


def test_a_review_records_its_call_tokens_stage_and_span(
    reviewing: Callable[..., Settings], llm: LlmServer, observed: Observed
) -> None:
    reader = observed.reader
    before = {
        "calls": total(reader, "scoring.llm.calls", **MODEL, **{"scoring.outcome": "ok"}),
        "input": total(reader, "gen_ai.client.token.usage", **MODEL, **{"gen_ai.token.type": "input"}),
        "stage": total(reader, "scoring.stage.duration", **{"scoring.stage": "llm"}),
    }
    settings = reviewing(**ALL)
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as client:
        body = client.post("/api/score", json=event(event_id="tel-1")).json()
    assert body["source"] == "llm" and body["timings_ms"]["llm"] > 0
    assert total(reader, "scoring.llm.calls", **MODEL, **{"scoring.outcome": "ok"}) == before["calls"] + 1
    assert total(reader, "gen_ai.client.token.usage", **MODEL, **{"gen_ai.token.type": "input"}) == before["input"] + 1
    assert total(reader, "scoring.stage.duration", **{"scoring.stage": "llm"}) == before["stage"] + 1
    assert total(reader, "scoring.llm.breaker.state") == 0
    spans = {s.name: s for s in observed.spans.get_finished_spans()}
    assert "llm" in spans, sorted(spans)
    request = next(s for s in spans.values() if s.name.startswith("POST"))
    assert spans["llm"].parent is not None and spans["llm"].parent.span_id == request.context.span_id


def test_failures_and_the_open_breaker_are_recorded(
    reviewing: Callable[..., Settings], llm: LlmServer, observed: Observed
) -> None:
    reader = observed.reader
    failures = total(reader, "scoring.llm.failures", **MODEL, **{"error.type": "review_failed"})
    skipped = total(reader, "scoring.llm.calls", **MODEL, **{"scoring.outcome": "skipped"})
    llm.behaviour.fault = "500"
    settings = reviewing(**ALL, breaker_failures=1)
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as client:
        for i in range(3):
            assert client.post("/api/score", json=event(event_id=f"f-{i}")).status_code == 200
    assert total(reader, "scoring.llm.failures", **MODEL, **{"error.type": "review_failed"}) == failures + 1
    assert total(reader, "scoring.llm.calls", **MODEL, **{"scoring.outcome": "skipped"}) == skipped + 2
    assert total(reader, "scoring.llm.breaker.state") == 2  # open
