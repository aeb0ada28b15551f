"""Observability: every stage measured, traced and alertable.

    catalogue   every instrument: name, kind, unit, attributes (standard library only)
    metrics     the in-process series the hot path records into, and the recording API
    tracing     W3C trace context and the sampling decision, before any span exists
    logs        JSON lines; one rate-limited line per rejected input
    process     which Telemetry this process set up (light)
    asgi        the HTTP middleware: request duration, one span per sampled request
    bridge      the series as OpenTelemetry metrics, for every reader (heavy)
    setup       set up once: meter provider, Prometheus, tracer, Azure Monitor (heavy)

Importing `shared.telemetry` loads nothing of OpenTelemetry: `setup` and `bridge` load it.
"""
