"""The Service Bus load tools' pure parts: events, pacing, message building, the latency report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
from azure.servicebus import ServiceBusMessage

from bench.servicebus import Drained, events, percentile, schedule, sdk_messages
from shared.domain.events import decode_event


def test_events_are_valid_payments_with_ids_unique_to_the_run() -> None:
    made = list(events(250, "run1"))
    assert len({event_id for event_id, _ in made}) == 250
    for event_id, body in made[:5]:
        assert decode_event(body).event_id == event_id and event_id.startswith("run1-")


def test_schedule_keeps_the_rate() -> None:
    plan = list(schedule(1000, rate=500.0, chunk=100))
    assert [(start, stop) for _, start, stop in plan][:2] == [(0, 100), (100, 200)] and plan[-1][2] == 1000
    assert plan[-1][0] == 900 / 500.0  # the last batch goes out at 1.8 s: 1000 events in ~2 s


def test_messages_carry_the_event_id_as_message_id() -> None:
    [msg] = sdk_messages([("e-1", b"{}")])
    assert isinstance(msg, ServiceBusMessage) and msg.message_id == "e-1"


def test_drain_reports_latency_and_duplicates() -> None:
    sent = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    drained = Drained()
    for i in range(100):
        body = orjson.dumps({"event_id": f"e-{i}", "enqueued_time": "2026-11-29T03:00:00Z"})
        drained.add(f"e-{i}", body, sent + timedelta(milliseconds=i + 1))
    drained.add("e-5", b"{}", sent)  # a second result for the same payment
    drained.add("e-x", b"not json", sent)
    report = drained.summary()
    assert (report["results"], report["duplicates"], report["unreadable"]) == (101, 1, 1)
    assert report["latency_ms"] == {"p50": 51.0, "p90": 91.0, "p99": 100.0, "p99.9": 100.0}
    assert percentile([], 50) is None
