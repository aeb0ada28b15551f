"""Telemetry set up once per process: metric readers, the tracer, and Azure Monitor when configured.

    APPLICATIONINSIGHTS_CONNECTION_STRING set   azure-monitor-opentelemetry for traces and logs
                                                (Entra ingestion: a managed identity credential
                                                from APPLICATIONINSIGHTS_AUTHENTICATION_STRING),
                                                plus an Azure Monitor metric reader
    always                                      the OpenTelemetry SDK: a MeterProvider with the
                                                Prometheus reader behind /api/metrics, a tracer

One exporter per signal: if something configured a global SDK tracer provider before us
(the Functions worker does when PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true), it is
used as it is and the distro is not configured a second time.

Heavy: imported by `configure` (from `build_service`) only, never on function_app's path.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry, generate_latest

from shared.domain.answers import ModelView
from shared.settings import Settings
from shared.telemetry import metrics, process
from shared.telemetry.bridge import AzureMonitorReader, Bridge, InMemoryReader, PrometheusReader
from shared.telemetry.catalogue import DEGRADED_COMPONENTS, by_name
from shared.telemetry.logs import rejections
from shared.telemetry.tracing import format_traceparent

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from shared.domain.answers import EnsembleView, Readiness, Stats

__all__ = ["Telemetry", "Watched", "configure", "traceparent_of"]

log = logging.getLogger(__name__)

SERVICE_NAME = "fraud-scoring"
LOG_REJECTIONS_PER_S = 10.0  # fixed by design: rejected-input lines a second; the rest are counted, never lost
_HOOKED: weakref.WeakSet[Any] = weakref.WeakSet()
STAGE_ORDER = ("parse", "features", "queue", "cache", "inference", "llm")  # laid end to end in a trace


class Named(Protocol):
    """A model's lifecycle event, as telemetry reads it (shared.models.registry.RegistryEvent)."""

    @property
    def name(self) -> str: ...


class Models(Protocol):
    """The models' lifecycle telemetry follows (shared.core.admin.Admin's `on_model`)."""

    def on_model(self, kind: Literal["activated", "failed"], hook: Callable[[Named], None]) -> None: ...


class Watched(Protocol):
    """What the telemetry reads of the core at collection time (shared.core.service.ScoringService):
    its answers (shared/domain/answers.py, the layer below this one), read as the types they are."""

    @property
    def admin(self) -> Models: ...

    def stats(self) -> Stats: ...

    def models(self) -> Sequence[ModelView | EnsembleView]: ...

    def readiness(self) -> Readiness: ...


class Telemetry:
    """The process's meter provider, Prometheus registry and tracer."""

    def __init__(
        self,
        settings: Settings,
        *,
        readers: Sequence[InMemoryReader] = (),
        span_processors: Sequence[SpanProcessor] = (),
        export: bool = True,
    ) -> None:
        self.ratio = settings.trace_sample_ratio
        self.resource = Resource.create({"service.name": SERVICE_NAME})
        self.bridge = Bridge(self.resource)
        self.registry = CollectorRegistry(auto_describe=False)
        self._watched: Watched | None = None
        self._propagator = TraceContextTextMapPropagator()
        readers_: list[Any] = [
            PrometheusReader(self.bridge, registry=self.registry, disable_target_info=True, scope_info_enabled=False)
        ]
        for reader in readers:
            reader.attach(self.bridge)
            readers_.append(reader)
        connection = settings.applicationinsights_connection_string if export else None
        credential = _credential(settings) if connection else None
        if connection:
            readers_.append(_azure_metric_reader(connection, credential, self.bridge))
        self.meter_provider = MeterProvider(metric_readers=readers_, resource=self.resource)
        self._observe()
        self.tracer_provider = self._tracing(connection, credential, span_processors)
        self.tracer: Tracer = self.tracer_provider.get_tracer("shared.telemetry")
        rejections.configure(LOG_REJECTIONS_PER_S)

    # -- traces ------------------------------------------------------------------------

    def _tracing(self, connection: str | None, credential: Any, processors: Sequence[SpanProcessor]) -> Any:
        existing = trace.get_tracer_provider()
        if connection and isinstance(existing, TracerProvider):
            log.warning("an OpenTelemetry tracer provider is already set (the worker's?): exporting through it")
            provider: Any = existing
        elif connection:
            from azure.monitor.opentelemetry import configure_azure_monitor

            # sampling_ratio 1.0: the decision is ours, made before a span exists
            # (tracing.sampled), so the distro keeps what we start. Its library instrumentations
            # stay off: they would start root spans of their own for unsampled requests.
            configure_azure_monitor(
                connection_string=connection,
                credential=credential,
                disable_metrics=True,
                sampling_ratio=1.0,
                enable_live_metrics=False,
                logger_name="shared",
                resource=self.resource,
                instrumentation_options={name: {"enabled": False} for name in _INSTRUMENTATIONS},
            )
            provider = trace.get_tracer_provider()
        else:
            provider = TracerProvider(resource=self.resource)  # exports nothing: spans for tests
        for processor in processors:
            provider.add_span_processor(processor)
        return provider

    def span(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        traceparent: str | None = None,
        tracestate: str | None = None,
        context: Context | None = None,
        start_ns: int | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> Span:
        """Start a span under the W3C `traceparent` (or `context`); end it with `span.end()`."""
        if context is None and traceparent:
            carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
            context = self._propagator.extract(carrier)
        return self.tracer.start_span(name, context=context, kind=kind, start_time=start_ns, attributes=attributes)

    def stage_spans(self, parent: Span, start_ns: int, timings_ms: dict[str, float]) -> None:
        """Child spans of `parent` for each measured stage, laid end to end from `start_ns`."""
        context = trace.set_span_in_context(parent)
        at = start_ns
        for stage in STAGE_ORDER:
            ms = timings_ms.get(stage)
            if not ms:
                continue
            end = at + int(ms * 1_000_000)
            self.tracer.start_span(stage, context=context, start_time=at).end(end_time=end)
            at = end

    # -- metrics -------------------------------------------------------------------------

    def watch(self, service: Watched) -> None:
        """Read `service`'s counters at each collection and follow its models' lifecycle."""
        self._watched = service
        if service not in _HOOKED:  # the counters are the process's: one hook per service
            _HOOKED.add(service)
            service.admin.on_model("activated", lambda e: metrics.model_event(e.name, "activated"))
            service.admin.on_model("failed", lambda e: metrics.model_event(e.name, "failed"))

    def _observe(self) -> None:
        meter = self.meter_provider.get_meter("shared.telemetry")
        for name, callback, kind in (
            ("process.uptime", self._uptime, "gauge"),
            ("scoring.events", self._events, "counter"),
            ("scoring.cache.lookups", self._lookups, "counter"),
            ("scoring.features.defaulted.ratio", self._defaulted, "gauge"),
            ("scoring.degraded", self._degraded_components, "gauge"),
            ("scoring.model.active", self._active, "gauge"),
        ):
            spec = by_name(name)
            create = meter.create_observable_counter if kind == "counter" else meter.create_observable_gauge
            create(name, callbacks=[callback], unit=spec.unit, description=spec.description)

    def _uptime(self, options: CallbackOptions) -> Iterable[Observation]:
        # always one point, so a collection is never empty and the bridge always runs
        return [Observation((time.time_ns() - self.bridge.started) / 1e9)]

    def _stats(self) -> Stats | None:
        return self._watched.stats() if self._watched is not None else None

    def _events(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None or not stats.events.scored:
            return []
        scored, defaulted = stats.events.scored, stats.events.defaulted
        return [
            Observation(scored - defaulted, {"scoring.defaulted": "false"}),
            Observation(defaulted, {"scoring.defaulted": "true"}),
        ]

    def _lookups(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        if stats is None:
            return []
        return [
            Observation(count, {"scoring.cache": cache, "scoring.cache.tier": tier})
            for cache, counts in (("predictions", stats.predictions), ("features", stats.features))
            for tier, count in (("l1", counts.l1_hits), ("l2", counts.l2_hits), ("miss", counts.misses))
        ]

    def _defaulted(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats()
        return [Observation(stats.events.recent_defaulted_share)] if stats is not None else []

    def _degraded_components(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._watched is None:
            return []
        readiness = self._watched.readiness()
        return [
            Observation(int(readiness.lists(name)), {"scoring.component": name}) for name in sorted(DEGRADED_COMPONENTS)
        ]

    def _active(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._watched is None:
            return []
        return [
            Observation(1, {"scoring.model": m.name, "scoring.model.version": m.active_version})
            for m in self._watched.models()
            if isinstance(m, ModelView)  # an ensemble's version is its members' (scoring.model.active is per model)
        ]

    def prometheus_text(self) -> bytes:
        """Every metric in the Prometheus text format (what GET /api/metrics serves)."""
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        self.meter_provider.shutdown()
        if isinstance(self.tracer_provider, TracerProvider) and self.tracer_provider is not trace.get_tracer_provider():
            self.tracer_provider.shutdown()


def traceparent_of(span: Span) -> str:
    """The W3C `traceparent` that continues from `span`."""
    ctx = span.get_span_context()
    return format_traceparent(ctx.trace_id, ctx.span_id, ctx.trace_flags.sampled)


_INSTRUMENTATIONS = (
    "azure_sdk",
    "django",
    "fastapi",
    "flask",
    "psycopg2",
    "requests",
    "urllib",
    "urllib3",
)


def _credential(settings: Settings) -> Any:
    """Entra ingestion: a managed identity, from `Authorization=AAD;ClientId=...` (None: the key)."""
    auth = settings.applicationinsights_authentication_string or ""
    parts = dict(p.split("=", 1) for p in auth.split(";") if "=" in p)
    if parts.get("Authorization", "").upper() != "AAD":
        return None
    from azure.identity import ManagedIdentityCredential

    client_id = parts.get("ClientId")
    return ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()


def _azure_metric_reader(connection: str, credential: Any, bridge: Bridge) -> AzureMonitorReader:
    from azure.monitor.opentelemetry.exporter import AzureMonitorMetricExporter

    exporter = AzureMonitorMetricExporter(connection_string=connection, credential=credential)
    return AzureMonitorReader(exporter, bridge)


def configure(settings: Settings) -> Telemetry | None:
    """The process's telemetry, set up on the first call (None when TELEMETRY is off)."""
    found = process.current()
    if found is None and settings.telemetry:
        found = Telemetry(settings)
        process.install(found)
    return found if isinstance(found, Telemetry) else None
