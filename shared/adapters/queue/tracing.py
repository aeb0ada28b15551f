"""What a queue batch tells telemetry: a span per sampled message, its stages, the verdicts counted.

spans(messages)                 a consumer span per sampled message (None: not sampled), under
                                the trace context its properties carry
stage_spans(span, scored, t0)   the core's stages under a message's span
continued(properties, span)     the trace context a result carries on
measure(done, t0)               verdicts counted, completed messages' age, the batch's duration; spans ended
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any

from shared.adapters.queue.messages import Incoming
from shared.telemetry import metrics, process
from shared.telemetry.tracing import sampled

if TYPE_CHECKING:
    from shared.domain.answers import Scored

__all__ = ["INPUT", "continued", "measure", "spans", "stage_spans"]

INPUT = "payments"  # the trigger's queue, as telemetry names it


def spans(messages: Sequence[Incoming]) -> list[Any]:
    """A span per sampled message, under the trace context its properties carry (None: not sampled)."""
    telemetry = process.current()
    if telemetry is None:
        return [None] * len(messages)
    from opentelemetry.trace import SpanKind

    opened: list[Any] = []
    for msg in messages:
        parent = msg.properties.get("traceparent")
        if not sampled(parent, telemetry.ratio):
            opened.append(None)
            continue
        opened.append(
            telemetry.span(
                f"{INPUT} process",
                kind=SpanKind.CONSUMER,
                traceparent=parent,
                tracestate=msg.properties.get("tracestate"),
                attributes={
                    "messaging.system": "servicebus",
                    "messaging.destination.name": INPUT,
                    "messaging.message.id": msg.message_id,
                    "messaging.message.delivery_count": msg.delivery_count,
                },
            )
        )
    return opened


def stage_spans(span: Any, scored: Scored, started: float) -> None:
    """The core's stages of `scored` under the message's span, and the model that scored it."""
    telemetry = process.current()
    if telemetry is not None:
        begun = time.time_ns() - int((time.perf_counter() - started) * 1e9)
        telemetry.stage_spans(span, begun, scored.timings_ms)
        span.set_attribute("scoring.model", scored.model)
        span.set_attribute("scoring.model.version", scored.model_version)


def continued(properties: Mapping[str, str], span: Any) -> Mapping[str, str]:
    """The trace context a result carries: from this message's span when it has one, else as received."""
    if span is None:
        return properties
    from shared.telemetry.setup import traceparent_of

    traceparent = traceparent_of(span)
    return {**properties, "traceparent": traceparent, "Diagnostic-Id": traceparent}


def measure(done: Sequence[tuple[Incoming, Any, str]], started: float) -> None:
    """Each (message, its span, its outcome): verdicts counted, completed messages' age, the batch's
    duration; spans ended."""
    now = time.time()
    counts: dict[str, int] = {}
    for msg, _, outcome in done:
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome == "completed" and msg.enqueued_time is not None:
            metrics.queue_age(now - _timestamp(msg))
    for outcome, count in counts.items():
        metrics.queue_message(outcome, count)
    metrics.queue_batch(INPUT, time.perf_counter() - started)
    for _, span, outcome in done:
        if span is not None:
            span.set_attribute("scoring.outcome", outcome)
            span.end()


def _timestamp(msg: Incoming) -> float:
    assert msg.enqueued_time is not None  # noqa: S101 narrows the type: callers check it first
    when = msg.enqueued_time if msg.enqueued_time.tzinfo else msg.enqueued_time.replace(tzinfo=UTC)
    return when.timestamp()
