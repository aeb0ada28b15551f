"""The instruments of the catalogue, as cheap in-process series, and the API that records them.

An OpenTelemetry SDK `Histogram.record(v, attributes)` re-validates and re-hashes the
attributes on every call, at a cost near a whole score's (docs/benchmark.md, "Measurements
behind the code's shape"). So the hot path records into these series instead: one dict lookup
by a tuple of attribute values (or none: series are bound once), one `bisect` and a few additions. `shared.telemetry.bridge` hands them to every OpenTelemetry metric reader at
collection time (Prometheus, Azure Monitor, the in-memory reader of tests) as ordinary
OpenTelemetry histograms, sums and gauges under the catalogue's names.

An event's six stage timings (`stages`), the largest record made per request, are not even
that: they are packed as six doubles onto a buffer, and `fold` puts the buffer into the six
histograms in bulk (numpy's `searchsorted` and `bincount`, every 512 events and whenever a
reader collects). A reader sees what recording one event at a time would have given it
(tests/telemetry/test_metrics.py holds the two to each other), at a fraction of the
instructions (docs/benchmark.md, "Telemetry recorded in bulk").

Everything here is the standard library; the recording functions are what other layers call:

    request(method, route, status, source, seconds)        one HTTP request (the ASGI middleware)
    stages(timings_ms)                                      one scored event's stage timings
    batch(model, size)                                      one model batch (once per batch)
    model_event(model, outcome)                             a version activated or rejected
    queue_message(outcome) / queue_age(seconds) / queue_batch(queue, seconds)
    llm_call(model, seconds, outcome=..., input_tokens=..., output_tokens=..., error=None)
    llm_breaker(state)                                      closed | half_open | open
    feature_age(view) / feature_defaulted(view, reason)     Feast views' ages (a bound series) and defaults
    prediction_records(outcome, count) / prediction_buffered(held)      the prediction log's writer
    shadow(model, version, outcome, difference)             one event scored by a shadow version
    canary(model, arm, decision) / canary_weight / canary_abort         the sticky canary
    drift_psi(model, version, feature, psi) / drift_defaulted(...)      drift per version (set per flush)
"""

from __future__ import annotations

import math
import struct
import threading
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from operator import itemgetter
from typing import Any, Literal

from shared.telemetry.catalogue import CATALOGUE, Spec

__all__ = [
    "BreakerState",
    "Counter",
    "Gauge",
    "Histogram",
    "Series",
    "batch",
    "canary",
    "canary_abort",
    "canary_weight",
    "drift_defaulted",
    "drift_forget",
    "drift_psi",
    "feature_age",
    "feature_defaulted",
    "fold",
    "instruments",
    "llm_breaker",
    "llm_call",
    "model_event",
    "over_budget",
    "prediction_buffered",
    "prediction_records",
    "queue_age",
    "queue_batch",
    "queue_message",
    "request",
    "shadow",
    "stages",
]

Key = tuple[str, ...]  # attribute values, in the spec's attribute order
BreakerState = Literal["closed", "half_open", "open"]
BREAKER_VALUES: dict[str, int] = {"closed": 0, "half_open": 1, "open": 2}


class Series:
    """One attribute set of a histogram: bucket counts, sum, count and the largest value.

    `window_max` covers the time since a delta reader last took it (the Azure Monitor
    exporter sends a max per export interval: the queue-age alert reads it); `max` is the
    process lifetime's. The minimum is the lower bound of the lowest bucket in use.
    """

    __slots__ = ("bounds", "count", "counts", "edges", "max", "sum", "window_max")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.edges: Any = None  # `bounds` as a numpy array, made by the first `record_many`
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self.max = self.window_max = -math.inf

    def record(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # bucket i holds (bounds[i-1], bounds[i]]
        self.sum += value
        self.count += 1
        if value > self.window_max:
            self.window_max = value

    def take_window_max(self) -> float:
        """The largest value since the last call (a delta reader's interval)."""
        high = self.window_max
        if high > self.max:
            self.max = high
        self.window_max = -math.inf
        return high

    def record_many(self, values: Any) -> None:
        """Values in bulk (a float64 numpy array): the same buckets, count and max as `record`
        one at a time (the sum is numpy's, which may differ from a running sum in its last bits)."""
        import numpy as np  # loaded by the scoring core long before a first fold

        if not len(values):
            return
        if self.edges is None:
            self.edges = np.array(self.bounds, dtype=np.float64)
        found = np.bincount(self.edges.searchsorted(values, side="left"), minlength=len(self.counts))
        counts = self.counts
        for i in np.flatnonzero(found).tolist():  # searchsorted "left" is bisect_left
            counts[i] += int(found[i])
        self.sum += float(values.sum())
        self.count += len(values)
        high = float(values.max())
        if high > self.window_max:
            self.window_max = high

    def lifetime_max(self) -> float:
        return max(self.max, self.window_max)

    def low(self, counts: list[int] | None = None) -> float:
        """The lower bound of the lowest bucket holding a value (0 for the first)."""
        for i, c in enumerate(self.counts if counts is None else counts):
            if c:
                return self.bounds[i - 1] if i else 0.0
        return 0.0


class Counter:
    """A monotonic count per attribute set."""

    __slots__ = ("spec", "values")

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.values: dict[Key, float] = {}

    def add(self, key: Key, amount: float = 1) -> None:
        self.values[key] = self.values.get(key, 0) + amount


class Gauge:
    """The last value set per attribute set."""

    __slots__ = ("spec", "values")

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.values: dict[Key, float] = {}

    def set(self, key: Key, value: float) -> None:
        self.values[key] = value


class Histogram:
    """A distribution per attribute set; `series(key)` binds one (keep it where it is hot)."""

    __slots__ = ("spec", "values")

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.values: dict[Key, Series] = {}

    def series(self, key: Key = ()) -> Series:
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = Series(self.spec.buckets)
        return found

    def record(self, key: Key, value: float) -> None:
        self.series(key).record(value)


Instrument = Counter | Gauge | Histogram
_KINDS: dict[str, type[Counter] | type[Gauge] | type[Histogram]] = {
    "counter": Counter,
    "gauge": Gauge,
    "histogram": Histogram,
}
# process-wide, like the OpenTelemetry API's global meter: every layer records here
# without being handed anything, and each reader sees the whole process.
_ALL: dict[str, Instrument] = {spec.name: _KINDS[spec.kind](spec) for spec in CATALOGUE}

# The instruments those who record may wish to see by name (and the bridge iterates).
HTTP_DURATION: Histogram = _ALL["http.server.request.duration"]  # type: ignore[assignment]
STAGE_DURATION: Histogram = _ALL["scoring.stage.duration"]  # type: ignore[assignment]
BATCH_SIZE: Histogram = _ALL["scoring.batch.size"]  # type: ignore[assignment]
RELOADS: Counter = _ALL["scoring.model.reloads"]  # type: ignore[assignment]
SHED: Counter = _ALL["scoring.requests.shed"]  # type: ignore[assignment]
OVER_BUDGET: Counter = _ALL["scoring.model.over_budget"]  # type: ignore[assignment]
QUEUE_MESSAGES: Counter = _ALL["scoring.queue.messages"]  # type: ignore[assignment]
QUEUE_AGE: Histogram = _ALL["scoring.queue.message.age"]  # type: ignore[assignment]
QUEUE_BATCH: Histogram = _ALL["messaging.process.duration"]  # type: ignore[assignment]
LLM_CALLS: Counter = _ALL["scoring.llm.calls"]  # type: ignore[assignment]
LLM_REVIEWS: Counter = _ALL["scoring.llm.reviews"]  # type: ignore[assignment]
LLM_FAILURES: Counter = _ALL["scoring.llm.failures"]  # type: ignore[assignment]
LLM_BREAKER: Gauge = _ALL["scoring.llm.breaker.state"]  # type: ignore[assignment]
LLM_TOKENS: Histogram = _ALL["gen_ai.client.token.usage"]  # type: ignore[assignment]
LLM_DURATION: Histogram = _ALL["gen_ai.client.operation.duration"]  # type: ignore[assignment]
FEATURE_AGE: Histogram = _ALL["scoring.features.age"]  # type: ignore[assignment]
FEATURE_DEFAULTED: Counter = _ALL["scoring.features.defaulted"]  # type: ignore[assignment]
PREDICTION_RECORDS: Counter = _ALL["scoring.prediction_log.records"]  # type: ignore[assignment]
PREDICTION_BUFFERED: Gauge = _ALL["scoring.prediction_log.buffered"]  # type: ignore[assignment]
SHADOW_EVENTS: Counter = _ALL["scoring.shadow.events"]  # type: ignore[assignment]
SHADOW_DIFFERENCE: Histogram = _ALL["scoring.shadow.score_difference"]  # type: ignore[assignment]
CANARY_DECISIONS: Counter = _ALL["scoring.canary.decisions"]  # type: ignore[assignment]
CANARY_WEIGHT: Gauge = _ALL["scoring.canary.weight"]  # type: ignore[assignment]
CANARY_ABORTS: Counter = _ALL["scoring.canary.aborts"]  # type: ignore[assignment]
DRIFT_PSI: Gauge = _ALL["scoring.drift.psi"]  # type: ignore[assignment]
DRIFT_DEFAULTED: Gauge = _ALL["scoring.drift.defaulted.ratio"]  # type: ignore[assignment]

STAGES = ("parse", "features", "cache", "queue", "inference", "llm", "total")
_STAGE_SERIES = {stage: STAGE_DURATION.series((stage,)) for stage in STAGES}  # bound once


# NOTE: the stage timings `stages` packed (six doubles an event, in `_ROW_STAGES` order) and `fold`
# has not yet put in a histogram. The loop appends while a reader's thread (Azure Monitor's
# exporter) may fold: a fold copies a prefix and deletes that prefix (each one atomic under the
# GIL), so an append in between stays for the next fold; folds themselves take turns.
_ROW_STAGES = ("parse", "features", "cache", "queue", "inference", "total")  # what every event's timings hold
_ROW = itemgetter(*_ROW_STAGES)
_PACK = struct.Struct(f"{len(_ROW_STAGES)}d").pack
_PENDING = bytearray()
FOLD_EVENTS = 512  # a fold every 512 events: a pause of ~0.1 ms
_FOLD_BYTES = FOLD_EVENTS * struct.calcsize(f"{len(_ROW_STAGES)}d")
_FOLDING = threading.Lock()


def instruments() -> Iterator[Instrument]:
    """Every in-process instrument (what the bridge exports), with everything pending folded in."""
    fold()
    return iter(_ALL.values())


def fold() -> None:
    """Put the stage timings `stages` packed into their histograms."""
    import numpy as np  # loaded by the scoring core long before a first fold

    with _FOLDING:
        taken = bytes(_PENDING)
        del _PENDING[: len(taken)]
        if not taken:
            return
        table = np.frombuffer(taken, dtype=np.float64).reshape(-1, len(_ROW_STAGES)) / 1000.0  # ms -> s
        for column, stage in enumerate(_ROW_STAGES):
            _STAGE_SERIES[stage].record_many(table[:, column])


_REQUEST_SERIES: dict[tuple[str, str, int, str], Series] = {}  # by the attributes as `request` gets them


def request(method: str, route: str, status: int, source: str, seconds: float) -> None:
    """One HTTP request: `source` is where its answer came from (model, cache) or "" for none."""
    series = _REQUEST_SERIES.get((method, route, status, source))
    if series is None:  # bound once per attribute set: no `str(status)` and no call per request
        series = _REQUEST_SERIES[(method, route, status, source)] = HTTP_DURATION.series(
            (method, route, str(status), source)
        )
    series.counts[bisect_left(series.bounds, seconds)] += 1  # Series.record inlined
    series.sum += seconds
    series.count += 1
    if seconds > series.window_max:
        series.window_max = seconds


def stages(timings_ms: Mapping[str, float], count: int = 1) -> None:
    """Scored events' stage timings, as `Scored.timings_ms` holds them (milliseconds); `count`
    events that share the same timings (the rows of one batch request) are recorded at once.

    An event's usual six are packed as doubles (two C calls) and folded in bulk; timings
    with a review's wait (`llm`), or shared by a batch's rows, are recorded at once."""
    if count == 1 and len(timings_ms) == len(_ROW_STAGES):
        try:
            _PENDING.extend(_PACK(*_ROW(timings_ms)))
        except KeyError:  # six stages, not the usual six (no event's today)
            _stages_now(timings_ms, 1)
            return
        if len(_PENDING) >= _FOLD_BYTES:
            fold()
    else:
        _stages_now(timings_ms, count)


def _stages_now(timings_ms: Mapping[str, float], count: int) -> None:
    series = _STAGE_SERIES
    for stage, ms in timings_ms.items():
        found = series.get(stage)
        if found is not None:  # Series.record inlined: six of these per event
            value = ms / 1000.0
            found.counts[bisect_left(found.bounds, value)] += count
            found.sum += value * count
            found.count += count
            if value > found.window_max:
                found.window_max = value


def batch(model: str, size: int) -> None:
    """One model batch of `size` requests."""
    BATCH_SIZE.series((model,)).record(size)


def model_event(model: str, outcome: Literal["activated", "failed"]) -> None:
    """A version of `model` was activated, or a file was rejected."""
    RELOADS.add((model, outcome))


def over_budget(model: str, limit: str, rows: int) -> None:
    """A run of `model` on `rows` rows was stopped by its deadline or the memory cap (`limit`)."""
    OVER_BUDGET.add((model, limit), rows)


def shed(reason: Literal["overloaded", "deadline"]) -> None:
    """Work turned away: refused at once (overloaded) or dropped past its deadline."""
    SHED.add((reason,))


def queue_message(outcome: str, count: int = 1) -> None:
    """Messages given a verdict: completed, duplicate, rejected or failed."""
    QUEUE_MESSAGES.add((outcome,), count)


def queue_age(seconds: float) -> None:
    """One completed message: from its enqueued time to its completion."""
    QUEUE_AGE.series().record(max(seconds, 0.0))


def queue_batch(queue: str, seconds: float) -> None:
    """One invocation's batch of messages from `queue`."""
    QUEUE_BATCH.series(("servicebus", queue)).record(seconds)


def llm_review(direction: str, prompt: str) -> None:
    """One ended review by what it did to the local decision: escalated, confirmed, lowered
    (a permitted downgrade, LLM_REVIEW_MAY_LOWER) or refused (a lower verdict not applied)."""
    LLM_REVIEWS.add((direction, prompt))


def llm_call(
    model: str,
    seconds: float,
    *,
    outcome: str = "ok",
    input_tokens: int = 0,
    output_tokens: int = 0,
    error: str | None = None,
) -> None:
    """One LLM review call (the reviewer records it; a skipped call has outcome `skipped`).

    `error` is the failure's type (e.g. `timeout`, `RateLimitError`): the call counts as a
    failure too. (The `llm` stage is what a request waited for its review: `stages()`.)
    """
    LLM_CALLS.add((model, outcome))
    if error is not None:
        LLM_FAILURES.add((model, error))
    if outcome == "skipped":
        return
    LLM_DURATION.series((model, error or "")).record(seconds)
    if input_tokens:
        LLM_TOKENS.series((model, "input")).record(input_tokens)
    if output_tokens:
        LLM_TOKENS.series((model, "output")).record(output_tokens)


def feature_age(view: str) -> Series:
    """The age series of a Feast feature view (bound once per model plan; `record(seconds)` per lookup)."""
    return FEATURE_AGE.series((view,))


def feature_defaulted(view: str, reason: str, count: int = 1) -> None:
    """`count` features of `view` took their model default: missing, null or stale."""
    FEATURE_DEFAULTED.add((view, reason), count)


def llm_breaker(state: BreakerState) -> None:
    """The LLM circuit breaker changed state."""
    LLM_BREAKER.set((), BREAKER_VALUES[state])


PredictionOutcome = Literal["written", "dropped_full", "dropped_sink", "dropped_shutdown"]


def prediction_records(outcome: PredictionOutcome, count: int = 1) -> None:
    """`count` decision records written to the sink, or dropped (and why)."""
    PREDICTION_RECORDS.add((outcome,), count)


def prediction_buffered(held: int) -> None:
    """The records the prediction log holds in memory now."""
    PREDICTION_BUFFERED.set((), held)


def shadow(
    model: str,
    version: str,
    outcome: Literal["agreed", "disagreed", "dropped", "failed"],
    difference: float | None = None,
) -> None:
    """One event scored by `version`, the shadow of `model` (or dropped, or failed); `difference`
    is |shadow score - live score|."""
    SHADOW_EVENTS.add((model, version, outcome))
    if difference is not None:
        SHADOW_DIFFERENCE.series((model, version)).record(difference)


def shadow_many(model: str, version: str, agreed: int, disagreed: int, failed: int, differences: Any) -> None:
    """A batch of `shadow` calls at once: its counts, and |shadow score - live score| of each scored
    event (a float64 numpy array)."""
    for outcome, count in (("agreed", agreed), ("disagreed", disagreed), ("failed", failed)):
        if count:
            SHADOW_EVENTS.add((model, version, outcome), count)
    SHADOW_DIFFERENCE.series((model, version)).record_many(differences)


def canary(model: str, arm: Literal["live", "canary"], decision: str, count: int = 1) -> None:
    """Decisions of `model` under a canary split: `decision` is approve, review, decline or error."""
    CANARY_DECISIONS.add((model, arm, decision), count)


def canary_weight(model: str, weight: float) -> None:
    """The share of users routed to the canary of `model` now."""
    CANARY_WEIGHT.set((model,), weight)


def canary_abort(model: str, reason: Literal["api", "decline_share", "error_rate"]) -> None:
    """A canary of `model` was aborted."""
    CANARY_ABORTS.add((model, reason))


def drift_psi(model: str, version: str, feature: str, psi: float) -> None:
    """The population stability index of `feature` (or `score`) of a version, now."""
    DRIFT_PSI.set((model, version, feature), psi)


def drift_defaulted(model: str, version: str, feature: str, share: float) -> None:
    """The defaulted share of `feature` in a version's last records, now."""
    DRIFT_DEFAULTED.set((model, version, feature), share)


def drift_forget(model: str, version: str) -> None:
    """A retired version's drift series end (its gauges would otherwise alert forever)."""
    for gauge in (DRIFT_PSI, DRIFT_DEFAULTED):
        for key in [k for k in gauge.values if k[:2] == (model, version)]:
            del gauge.values[key]
