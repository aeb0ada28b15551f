"""A process telemetry with in-memory readers and span exporters, installed for one test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.settings import Settings
from shared.telemetry import process
from shared.telemetry.bridge import InMemoryReader
from shared.telemetry.setup import Telemetry


class Observed(NamedTuple):
    telemetry: Telemetry
    reader: InMemoryReader
    spans: InMemorySpanExporter


@pytest.fixture
def observed(settings: Settings) -> Iterator[Observed]:
    """Every request traced (ratio 1), metrics read in memory; the previous telemetry restored."""
    reader, spans = InMemoryReader(), InMemorySpanExporter()
    telemetry = Telemetry(
        dataclasses.replace(settings, trace_sample_ratio=1.0),
        readers=[reader],
        span_processors=[SimpleSpanProcessor(spans)],
        export=False,
    )
    previous = process.current()
    process.install(telemetry)
    yield Observed(telemetry, reader, spans)
    process.install(previous)
    telemetry.shutdown()


def points(reader: InMemoryReader, name: str) -> list[tuple[dict[str, Any], Any]]:
    """(attributes, data point) of every series of the metric `name` in one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    return [
        (dict(p.attributes or {}), p)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    ]


def total(reader: InMemoryReader, name: str, **attributes: str) -> float:
    """The count (histograms) or value (sums, gauges) summed over series matching `attributes`."""
    found = 0.0
    for attrs, point in points(reader, name):
        if all(attrs.get(k) == v for k, v in attributes.items()):
            found += point.count if hasattr(point, "count") else point.value
    return found
