"""A queue batch, a reload and an LLM review, as the in-memory reader and span exporter see them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.idempotency import MemoryResultStore
from shared.adapters.queue.messages import Incoming
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.service import ScoringService
from shared.telemetry import metrics
from shared.telemetry.tracing import format_traceparent, parse_traceparent, sampled
from tests.conftest import event
from tests.onnx_models import make_model
from tests.telemetry.conftest import Observed, points, total

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def message(event_id: str, *, age_s: float = 2.0, body: bytes | None = None) -> Incoming:
    return Incoming(
        message_id=event_id,
        body=body if body is not None else json.dumps(event(event_id=event_id)).encode(),
        enqueued_time=datetime.now(UTC) - timedelta(seconds=age_s),
        properties={"traceparent": PARENT},
    )


async def test_a_queue_batch_counts_verdicts_ages_and_carries_the_trace_out(
    service: ScoringService, observed: Observed
) -> None:
    publisher = MemoryPublisher()

    async def get() -> ScoringService:
        return service

    batch = QueueHandler(get, MemoryResultStore(), publisher, max_message_bytes=64 * 1024)
    reader = observed.reader
    before = {o: total(reader, "scoring.queue.messages", **{"scoring.outcome": o}) for o in ("completed", "rejected")}
    ages = total(reader, "scoring.queue.message.age")
    await batch.handle([message("q-1"), message("q-2"), message("q-bad", body=b"{nope")])
    await batch.handle([message("q-1")])  # redelivered: a duplicate
    assert total(reader, "scoring.queue.messages", **{"scoring.outcome": "completed"}) == before["completed"] + 2
    assert total(reader, "scoring.queue.messages", **{"scoring.outcome": "rejected"}) == before["rejected"] + 1
    assert total(reader, "scoring.queue.messages", **{"scoring.outcome": "duplicate"}) >= 1
    assert total(reader, "scoring.queue.message.age") == ages + 2
    [(_, age)] = points(reader, "scoring.queue.message.age")
    assert age.max >= 2.0
    assert total(reader, "messaging.process.duration", **{"messaging.destination.name": "payments"}) >= 2

    spans = observed.spans.get_finished_spans()
    consumer = [s for s in spans if s.name == "payments process"]
    assert consumer and all(f"{s.context.trace_id:032x}" == PARENT.split("-")[1] for s in consumer)
    first = next(s for s in consumer if s.attributes and s.attributes["messaging.message.id"] == "q-1")
    assert {c.name for c in spans if c.parent is not None and c.parent.span_id == first.context.span_id} >= {
        "parse",
        "inference",
    }
    out = next(m for m in publisher.sent if m.message_id == "q-1")
    parsed = parse_traceparent(out.properties["traceparent"])
    assert parsed is not None and parsed[:2] == (first.context.trace_id, first.context.span_id)
    assert out.properties["Diagnostic-Id"] == out.properties["traceparent"]


async def test_reloads_and_failures_are_counted_and_the_active_version_follows(
    service: ScoringService, observed: Observed
) -> None:
    from shared.errors import ModelInvalid
    from shared.models.repository import ModelRef

    observed.telemetry.watch(service)
    reader = observed.reader
    activated = total(reader, "scoring.model.reloads", **{"scoring.model": "fraud", "scoring.outcome": "activated"})
    failed = total(reader, "scoring.model.reloads", **{"scoring.model": "fraud", "scoring.outcome": "failed"})
    await service.admin.install_model(ModelRef("fraud", "2"), make_model(bias=0.5))
    with pytest.raises(ModelInvalid):
        await service.admin.install_model(ModelRef("fraud", "3"), b"not an onnx file")
    assert total(reader, "scoring.model.reloads", **{"scoring.model": "fraud", "scoring.outcome": "activated"}) == (
        activated + 1
    )
    assert (
        total(reader, "scoring.model.reloads", **{"scoring.model": "fraud", "scoring.outcome": "failed"}) == failed + 1
    )
    assert [a["scoring.model.version"] for a, _ in points(reader, "scoring.model.active")] == ["2"]


def test_llm_calls_failures_tokens_breaker_and_stage_are_recorded(observed: Observed) -> None:
    reader = observed.reader
    model = {"gen_ai.request.model": "gpt-4o-mini"}
    calls = total(reader, "scoring.llm.calls", **model)
    llm_stage = total(reader, "scoring.stage.duration", **{"scoring.stage": "llm"})
    metrics.llm_call("gpt-4o-mini", 0.42, input_tokens=350, output_tokens=40)
    metrics.llm_call("gpt-4o-mini", 2.0, outcome="error", error="timeout")
    metrics.llm_call("gpt-4o-mini", 0.0, outcome="skipped")
    metrics.llm_breaker("open")
    assert total(reader, "scoring.llm.calls", **model) == calls + 3
    assert total(reader, "scoring.llm.failures", **model, **{"error.type": "timeout"}) >= 1
    assert total(reader, "gen_ai.client.token.usage", **model, **{"gen_ai.token.type": "input"}) >= 1
    assert total(reader, "gen_ai.client.operation.duration", **model) >= 2
    assert total(reader, "scoring.llm.breaker.state") == 2
    assert total(reader, "scoring.stage.duration", **{"scoring.stage": "llm"}) == llm_stage  # the wait is the stage
    metrics.llm_breaker("closed")


def test_a_delta_reader_sees_each_interval_once_with_its_own_max() -> None:
    from opentelemetry.sdk.resources import Resource

    from shared.telemetry.bridge import Bridge

    bridge = Bridge(Resource.create({}))
    reader = object()
    bridge.collect(reader, delta=True)  # the baseline
    metrics.queue_age(7.5)
    metrics.queue_age(0.5)
    [age] = [m for m in bridge.collect(reader, delta=True) if m.name == "scoring.queue.message.age"]
    [point] = age.data.data_points
    assert (point.count, point.max, point.min, point.sum) == (2, 7.5, 0.25, 8.0)  # min: its bucket's lower bound
    assert not [m for m in bridge.collect(reader, delta=True) if m.name == "scoring.queue.message.age"]


def test_trace_context_parsing_and_the_sampling_rule() -> None:
    assert parse_traceparent(PARENT) == (int(PARENT[3:35], 16), int(PARENT[36:52], 16), True)
    for bad in ("", "00-xyz", "ff" + PARENT[2:], PARENT.replace("b7ad", "zzzz"), "00-" + "0" * 32 + PARENT[35:]):
        assert parse_traceparent(bad) is None, bad
    assert format_traceparent(*parse_traceparent(PARENT)) == PARENT  # type: ignore[misc]
    assert sampled(PARENT, 0.0) and not sampled(PARENT[:-2] + "00", 1.0)  # the parent decides
    assert sampled(None, 0.5, draw=0.1) and not sampled(None, 0.5, draw=0.9)
