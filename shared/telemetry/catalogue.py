"""Every instrument the service emits: name, kind, unit, attributes and meaning, in one table.

Names follow the OpenTelemetry semantic conventions where one exists
(`http.server.request.duration`, `messaging.process.duration`, `gen_ai.client.*`);
the rest live under `scoring.`. Units are UCUM (`s`, `1`, `{request}`): durations are
in seconds, as the conventions ask. Prometheus sees the same instruments under
`prometheus_name(spec)` (dots to underscores, the unit and `_total` appended, as the
OpenTelemetry Prometheus exporter writes them); Application Insights keeps the
OpenTelemetry name in `customMetrics.name`.

NOTE: standard library only. The infra checks (their own venv) and the ops checks read
this table to hold the Azure Monitor alerts, the Prometheus rules and the Grafana
dashboard to the names the code emits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CATALOGUE",
    "DEGRADED_COMPONENTS",
    "DURATION_BUCKETS_S",
    "Kind",
    "Spec",
    "by_name",
    "prometheus_name",
    "prometheus_names",
]

Kind = Literal["counter", "histogram", "gauge"]

# Seconds: dense below the 50 ms budget, where the service lives.
DURATION_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
AGE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
FEATURE_AGE_BUCKETS_S = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86_400.0, 7 * 86_400.0, 30 * 86_400.0)
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
TOKEN_BUCKETS = (16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0)
# What readiness can list as degraded (each reason starts with one): always reported, 0 when well.
DEGRADED_COMPONENTS = (
    "control", "features", "models", "overloaded", "platform", "predictions", "queue", "redis", "reviews",
)  # fmt: skip
DIFFERENCE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)


@dataclass(frozen=True, slots=True)
class Spec:
    """One instrument as emitted."""

    name: str
    kind: Kind
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


CATALOGUE: tuple[Spec, ...] = (
    Spec("process.uptime", "gauge", "s", "seconds since this process set its telemetry up"),
    # -- requests and stages --------------------------------------------------------------
    Spec(
        "http.server.request.duration",
        "histogram",
        "s",
        "HTTP request duration, as the app measured it (from its first byte read to its answer built)",
        ("http.request.method", "http.route", "http.response.status_code", "scoring.source"),
        DURATION_BUCKETS_S,
    ),
    Spec(
        "scoring.stage.duration",
        "histogram",
        "s",
        "time of one stage of one scored event: parse, features, cache, queue (batch wait), inference, llm, total",
        ("scoring.stage",),
        DURATION_BUCKETS_S,
    ),
    Spec(
        "scoring.events",
        "counter",
        "{event}",
        "events scored, by whether a user feature fell back to its model default",
        ("scoring.defaulted",),
    ),
    Spec(
        "scoring.degraded",
        "gauge",
        "1",
        "1 while readiness lists the component as degraded (control, features, models, overloaded, platform, "
        "predictions, queue, redis, reviews), else 0",
        ("scoring.component",),
    ),
    Spec(
        "scoring.features.defaulted.ratio",
        "gauge",
        "1",
        "share of the last 100 events scored with a user feature on its model default",
    ),
    Spec(
        "scoring.features.age",
        "histogram",
        "s",
        "age of a Feast feature view's values when read (now minus its `_ts`), per lookup (FEATURE_STORE=feast)",
        ("scoring.feature_view",),
        FEATURE_AGE_BUCKETS_S,
    ),
    Spec(
        "scoring.features.defaulted",
        "counter",
        "{feature}",
        "Feast features that took their model default, by view and why (missing, null, stale)",
        ("scoring.feature_view", "scoring.defaulted.reason"),
    ),
    # -- caches and batches ---------------------------------------------------------------
    Spec(
        "scoring.cache.lookups",
        "counter",
        "{lookup}",
        "cache lookups by cache (predictions, features) and the tier that answered (l1, l2, miss)",
        ("scoring.cache", "scoring.cache.tier"),
    ),
    Spec(
        "scoring.batch.size",
        "histogram",
        "{request}",
        "requests per model batch (recorded once per batch)",
        ("scoring.model",),
        BATCH_BUCKETS,
    ),
    # -- models ---------------------------------------------------------------------------
    Spec(
        "scoring.model.active",
        "gauge",
        "1",
        "1 for the version serving each model name (an info metric: the version is the attribute)",
        ("scoring.model", "scoring.model.version"),
    ),
    Spec(
        "scoring.model.reloads",
        "counter",
        "{reload}",
        "model versions activated or rejected (outcome: activated, failed)",
        ("scoring.model", "scoring.outcome"),
    ),
    Spec(
        "scoring.model.over_budget",
        "counter",
        "{row}",
        "rows whose model run a bound stopped (limit: deadline, memory); the version is quarantined and the last "
        "good version scores them",
        ("scoring.model", "scoring.limit"),
    ),
    Spec(
        "scoring.requests.shed",
        "counter",
        "{request}",
        "work turned away: overloaded (MAX_INFLIGHT, a batch queue of 1024 rows: refused at once) or deadline "
        "(dropped past REQUEST_TIMEOUT_MS)",
        ("scoring.reason",),
    ),
    # -- the queue path -------------------------------------------------------------------
    Spec(
        "scoring.queue.messages",
        "counter",
        "{message}",
        "queue messages by verdict: completed, duplicate, rejected, failed",
        ("scoring.outcome",),
    ),
    Spec(
        "scoring.queue.message.age",
        "histogram",
        "s",
        "enqueued time to completion of each completed message (the queue-age alert reads its max)",
        (),
        AGE_BUCKETS_S,
    ),
    Spec(
        "messaging.process.duration",
        "histogram",
        "s",
        "one invocation's batch of queue messages, decode to publish",
        ("messaging.system", "messaging.destination.name"),
        DURATION_BUCKETS_S,
    ),
    # -- the prediction log, shadow, canary and drift (shared/stores/prediction_log, shared/fleet) ----
    Spec(
        "scoring.prediction_log.records",
        "counter",
        "{record}",
        "decision records by outcome: written (in the sink), dropped_full (the buffer was full), "
        "dropped_sink (the sink failed past its retries), dropped_shutdown (not sent within the 5 s shutdown bound)",
        ("scoring.outcome",),
    ),
    Spec(
        "scoring.prediction_log.buffered",
        "gauge",
        "{record}",
        "decision records held in memory, waiting for the writer",
    ),
    Spec(
        "scoring.shadow.events",
        "counter",
        "{event}",
        "events scored by a model's shadow version, by outcome: agreed (same decision as the live one), "
        "disagreed, dropped (the shadow queue was full), failed",
        ("scoring.model", "scoring.model.version", "scoring.outcome"),
    ),
    Spec(
        "scoring.shadow.score_difference",
        "histogram",
        "1",
        "absolute difference between the shadow version's score and the live one's, per event",
        ("scoring.model", "scoring.model.version"),
        DIFFERENCE_BUCKETS,
    ),
    Spec(
        "scoring.canary.decisions",
        "counter",
        "{event}",
        "decisions of a model under a canary split, by arm (live, canary) and decision (approve, review, decline, error)",
        ("scoring.model", "scoring.arm", "scoring.decision"),
    ),
    Spec(
        "scoring.canary.weight",
        "gauge",
        "1",
        "the share of users routed to a model's canary version (0 when none or aborted)",
        ("scoring.model",),
    ),
    Spec(
        "scoring.canary.aborts",
        "counter",
        "{abort}",
        "canaries aborted, by reason: api, decline_share, error_rate",
        ("scoring.model", "scoring.reason"),
    ),
    Spec(
        "scoring.drift.psi",
        "gauge",
        "1",
        "population stability index of a version's last DRIFT_WINDOW records against its reference, "
        "for the score (`scoring.feature` = `score`) and each feature; > 0.2 is a shift",
        ("scoring.model", "scoring.model.version", "scoring.feature"),
    ),
    Spec(
        "scoring.drift.defaulted.ratio",
        "gauge",
        "1",
        "share of a version's last DRIFT_WINDOW records with the feature on its model default",
        ("scoring.model", "scoring.model.version", "scoring.feature"),
    ),
    # -- outcomes: the daily report's headline (shared/stores/prediction_log/daily.py) -----------
    # per version and role, over mature days only: `scoring.window` current (the newest CURRENT_DAYS
    # mature days) or baseline (the BASELINE_DAYS mature days before them); set once a day
    Spec(
        "scoring.outcomes.recall",
        "gauge",
        "1",
        "share of the fraud a version declined, over its mature days (labels past the maturity window)",
        ("scoring.model", "scoring.model.version", "scoring.role", "scoring.window"),
    ),
    Spec(
        "scoring.outcomes.precision",
        "gauge",
        "1",
        "share of a version's labelled declines that were fraud, over its mature days",
        ("scoring.model", "scoring.model.version", "scoring.role", "scoring.window"),
    ),
    Spec(
        "scoring.outcomes.missed.amount",
        "gauge",
        "{amount}",
        "amount lost to fraud a version approved, over its mature days (in the outcomes' currency)",
        ("scoring.model", "scoring.model.version", "scoring.role", "scoring.window"),
    ),
    Spec(
        "scoring.outcomes.immature.ratio",
        "gauge",
        "1",
        "share of a version's logged decisions on days still inside the maturity window (their labels not yet good)",
        ("scoring.model", "scoring.model.version", "scoring.role"),
    ),
    Spec(
        "scoring.outcomes.unmatched",
        "gauge",
        "{outcome}",
        "outcomes no logged decision matches yet, learned within the log's retention (kept; matched on a later run)",
    ),
    # -- the LLM review of the uncertain tail (recorded by shared/review) -------------------
    Spec(
        "scoring.llm.calls",
        "counter",
        "{call}",
        "LLM review calls by outcome (ok, error, timeout, skipped: budget or breaker open)",
        ("gen_ai.request.model", "scoring.outcome"),
    ),
    Spec(
        "scoring.llm.reviews",
        "counter",
        "{review}",
        "ended reviews by what they did to the local decision (scoring.direction: escalated, confirmed, "
        "lowered: a permitted downgrade, refused: a lower verdict not applied) and the prompt's version",
        ("scoring.direction", "scoring.prompt"),
    ),
    Spec(
        "scoring.llm.failures",
        "counter",
        "{call}",
        "LLM review calls that failed, by error type",
        ("gen_ai.request.model", "error.type"),
    ),
    Spec(
        "scoring.llm.breaker.state",
        "gauge",
        "1",
        "the LLM circuit breaker: 0 closed, 1 half-open, 2 open",
    ),
    Spec(
        "gen_ai.client.token.usage",
        "histogram",
        "{token}",
        "tokens per LLM call (gen_ai.token.type: input, output)",
        ("gen_ai.request.model", "gen_ai.token.type"),
        TOKEN_BUCKETS,
    ),
    Spec(
        "gen_ai.client.operation.duration",
        "histogram",
        "s",
        "duration of one LLM call",
        ("gen_ai.request.model", "error.type"),
        DURATION_BUCKETS_S,
    ),
)

_UNIT_WORDS = {"s": "seconds", "1": ""}  # the exporter adds no word for "1"


def by_name(name: str) -> Spec:
    """The spec named `name` (KeyError when the catalogue has none)."""
    for spec in CATALOGUE:
        if spec.name == name:
            return spec
    raise KeyError(name)


def prometheus_name(spec: Spec) -> str:
    """The name Prometheus scrapes for `spec` (histograms add _bucket, _sum, _count to it)."""
    base = spec.name.replace(".", "_")
    unit = _UNIT_WORDS.get(spec.unit, "" if spec.unit.startswith("{") else spec.unit)
    if unit and not base.endswith("_" + unit):
        base = f"{base}_{unit}"
    return f"{base}_total" if spec.kind == "counter" else base


def prometheus_names() -> set[str]:
    """Every series name a scrape can hold: histogram parts, counters' and gauges' names."""
    names: set[str] = set()
    for spec in CATALOGUE:
        name = prometheus_name(spec)
        names.update({name + "_bucket", name + "_sum", name + "_count"} if spec.kind == "histogram" else {name})
    return names
