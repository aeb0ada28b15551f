"""What a queue batch tells telemetry without a tracer installed: no spans, the trace context passed on
as received, and every verdict counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.queue.messages import Incoming
from shared.adapters.queue.tracing import continued, measure, spans
from shared.telemetry import metrics, process

TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.fixture
def no_telemetry() -> Iterator[None]:
    """No telemetry in this process for the test (another test may have installed one)."""
    installed = process.current()
    process.install(None)
    yield
    process.install(installed)


@pytest.mark.usefixtures("no_telemetry")
def test_without_telemetry_no_message_gets_a_span() -> None:
    assert spans([Incoming("m1", b"{}", properties=TRACE), Incoming("m2", b"{}")]) == [None, None]


def test_without_a_span_a_result_carries_the_trace_context_it_came_with() -> None:
    assert continued(TRACE, None) is TRACE


def test_each_verdict_is_counted_and_a_completed_message_ages() -> None:
    before = {o: metrics.QUEUE_MESSAGES.values.get((o,), 0) for o in ("completed", "failed", "rejected")}
    aged = metrics.QUEUE_AGE.series().count
    enqueued = datetime.now(UTC) - timedelta(seconds=2)
    done = [
        (Incoming("m1", b"{}", enqueued_time=enqueued), None, "completed"),
        (Incoming("m2", b"{}", enqueued_time=enqueued.replace(tzinfo=None)), None, "completed"),  # naive: UTC
        (Incoming("m3", b"{}"), None, "failed"),
        (Incoming("m4", b"{}", enqueued_time=enqueued), None, "rejected"),  # only completed ones age
    ]
    measure(done, time.perf_counter())
    after = {o: metrics.QUEUE_MESSAGES.values.get((o,), 0) for o in before}
    assert {o: after[o] - before[o] for o in before} == {"completed": 2, "failed": 1, "rejected": 1}
    assert metrics.QUEUE_AGE.series().count == aged + 2
