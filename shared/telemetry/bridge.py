"""Hands the in-process series (`shared.telemetry.metrics`) to OpenTelemetry metric readers.

A reader built here (`PrometheusReader`, `AzureMonitorReader`, `InMemoryReader`) is the
SDK's own reader with one addition: each time the MeterProvider gives it the collected
OpenTelemetry metrics, the bridge appends the in-process instruments as ordinary
OpenTelemetry `Histogram`, `Sum` and `Gauge` data under the catalogue's names, in the
reader's temporality (cumulative for Prometheus and tests, delta for Azure Monitor).

NOTE: `_receive_metrics` is the SDK's extension point for readers (every reader
implements it); the data classes used are the SDK's public export types.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from shared.telemetry import metrics
from shared.telemetry.metrics import Counter, Series

__all__ = ["AzureMonitorReader", "Bridge", "InMemoryReader", "PrometheusReader"]

SCOPE = InstrumentationScope("shared.telemetry")
CUMULATIVE, DELTA = AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA


class Bridge:
    """Turns the in-process instruments into OpenTelemetry metric data, per reader."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self.started = time.time_ns()
        self._last: dict[int, dict[tuple[str, tuple[str, ...]], tuple[float, ...]]] = {}  # delta readers' baselines

    def merge(self, data: MetricsData | None, reader: object, delta: bool) -> MetricsData:
        """`data` plus the in-process instruments, in one ResourceMetrics."""
        ours = ScopeMetrics(SCOPE, self.collect(reader, delta), "")
        if data is None or not data.resource_metrics:
            return MetricsData([ResourceMetrics(self.resource, [ours], "")])
        first, *rest = data.resource_metrics
        return MetricsData([ResourceMetrics(first.resource, [*first.scope_metrics, ours], first.schema_url), *rest])

    def collect(self, reader: object, delta: bool) -> list[Metric]:
        now = time.time_ns()
        last = self._last.setdefault(id(reader), {}) if delta else None
        start = self.started
        found: list[Metric] = []
        for instrument in metrics.instruments():
            spec = instrument.spec
            points: list[Any] = []
            point: Any
            value: Any
            for key, value in list(instrument.values.items()):
                attributes = dict(zip(spec.attributes, key, strict=True))
                if isinstance(value, Series):
                    point = _histogram_point(spec.name, key, value, attributes, start, now, last)
                elif isinstance(instrument, Counter):
                    point = _sum_point(spec.name, key, value, attributes, start, now, last)
                else:
                    point = NumberDataPoint(attributes, start, now, value)
                if point is not None:
                    points.append(point)
            if not points:
                continue
            temporality = DELTA if delta else CUMULATIVE
            if spec.kind == "histogram":
                data: Any = Histogram(points, temporality)
            elif spec.kind == "counter":
                data = Sum(points, temporality, is_monotonic=True)
            else:
                data = Gauge(points)
            found.append(Metric(spec.name, spec.description, spec.unit, data))
        return found


def _histogram_point(
    name: str,
    key: tuple[str, ...],
    series: Series,
    attributes: dict[str, str],
    start: int,
    now: int,
    last: dict[tuple[str, tuple[str, ...]], tuple[float, ...]] | None,
) -> HistogramDataPoint | None:
    counts, total, count = list(series.counts), series.sum, series.count
    if count == 0:
        return None
    bounds = series.bounds
    if last is None:
        return HistogramDataPoint(
            attributes, start, now, count, total, counts, bounds, series.low(), series.lifetime_max()
        )
    before = last.get((name, key), (0.0, 0.0, *([0] * len(counts))))
    last[(name, key)] = (count, total, *counts)
    if count == before[0]:
        return None
    high = series.take_window_max()  # one delta reader per process (Azure Monitor)
    diff = [int(c - b) for c, b in zip(counts, before[2:], strict=True)]
    return HistogramDataPoint(
        attributes, start, now, int(count - before[0]), total - before[1], diff, bounds, series.low(diff), high
    )


def _sum_point(
    name: str,
    key: tuple[str, ...],
    value: float,
    attributes: dict[str, str],
    start: int,
    now: int,
    last: dict[tuple[str, tuple[str, ...]], tuple[float, ...]] | None,
) -> NumberDataPoint | None:
    if last is None:
        return NumberDataPoint(attributes, start, now, value)
    before = last.get((name, key), (0.0,))[0]
    last[(name, key)] = (value,)
    return NumberDataPoint(attributes, start, now, value - before) if value != before else None


class PrometheusReader(PrometheusMetricReader):
    """The OpenTelemetry Prometheus reader, with the in-process instruments."""

    def __init__(self, bridge: Bridge, **options: Any) -> None:
        super().__init__(**options)
        self._bridge = bridge

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        super()._receive_metrics(self._bridge.merge(metrics_data, self, delta=False), timeout_millis, **kwargs)


class InMemoryReader(InMemoryMetricReader):
    """The SDK's in-memory reader (tests), with the in-process instruments (cumulative)."""

    def __init__(self, bridge: Bridge | None = None) -> None:
        super().__init__()
        self._bridge = bridge

    def attach(self, bridge: Bridge) -> None:
        self._bridge = bridge

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        if self._bridge is not None:
            metrics_data = self._bridge.merge(metrics_data, self, delta=False)
        super()._receive_metrics(metrics_data, timeout_millis, **kwargs)


class AzureMonitorReader(PeriodicExportingMetricReader):
    """The periodic exporting reader of Azure Monitor (delta), with the in-process instruments."""

    def __init__(self, exporter: MetricExporter, bridge: Bridge, **options: Any) -> None:
        super().__init__(exporter, **options)
        self._bridge = bridge

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        super()._receive_metrics(self._bridge.merge(metrics_data, self, delta=True), timeout_millis, **kwargs)
