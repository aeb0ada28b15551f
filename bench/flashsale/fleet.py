"""The fleet over time: offered load, the replicas ready to take it, what each request met.

Time advances in steps of `step_s`. In a step the ingress spreads the offered rate evenly over the
ready replicas; what a replica does at that rate comes from a window of the request-level
simulation (replica.py), cached by rate to within 2 %. That is exact enough because a replica's
state relaxes within tens of milliseconds (admission bounds its queue at MAX_QUEUED waiters for at
most MAX_QUEUE_WAIT_MS), while the fleet changes over seconds. The Service Bus queue does keep
state for minutes: its backlog is carried from step to step (a fluid FIFO), and each replica takes
one batch of up to `maxMessageBatchSize` at a time (docs/platform.md P2).

Every `hpa_sync_s` the controller (scaling.py) sees the signals and sets the replica count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from bench.flashsale.arrivals import Scenario
from bench.flashsale.infra import PLATFORM, ScaleRules
from bench.flashsale.inputs import Provisional, ServiceTimes
from bench.flashsale.replica import AdmissionRule, ReplicaWindow, simulate_replica
from bench.flashsale.scaling import Controller, Signals

__all__ = ["BATCH", "FLEETS", "HOSTLESS", "PATHS", "Minute", "ReplicaWindows", "Run", "admission_rule", "simulate"]

PATHS = ("http-single", "http-batch", "grpc-stream", "servicebus")
# The doors that never pass the Functions host (the app's own gRPC port, docs/api.md): no host throttle
# and no host CPU; the HTTP scale rule does not count their events (a stream is one long request).
HOSTLESS = frozenset({"grpc-unary", "grpc-stream"})
# How a fleet meets a sale known in advance (docs/capacity.md, "A sale known in advance"):
# "scheduled": the profile's floor, and the calendar's cron window (the profile's saleReplicas from
# saleLeadMinutes before the burst to 5 minutes after it); "floor": a floor of saleReplicas all day;
# "reactive": the profile's floor and the scale rules alone.
FLEETS = ("scheduled", "floor", "reactive")
WINDOW_TAIL_S = 300.0
BATCH = 64  # events per `score_batch` call (bench.worker's size)


@dataclass
class Minute:
    """One minute of a run (latencies in ms; counts in events)."""

    minute: int
    offered: float  # events/s, mean over the minute
    p50_ms: float
    p99_ms: float
    p999_ms: float
    answered: float
    refused: float  # 503 (admission, deadline) and 429 (the host's throttle)
    replicas_ready: float  # mean over the minute
    replicas_max: int  # the most replicas (ready or starting) in the minute
    queue_depth: float  # Service Bus active messages at the minute's end

    @property
    def refused_share(self) -> float:
        total = self.answered + self.refused
        return self.refused / total if total else 0.0


@dataclass
class Run:
    """A scenario on one path under one set of rules."""

    scenario: str
    path: str
    rules: ScaleRules
    minutes: list[Minute] = field(default_factory=list)
    t: list[float] = field(default_factory=list)  # per step, for the plot
    rate: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    target: list[int] = field(default_factory=list)
    fleet: str = "scheduled"
    replica_s: float = 0.0  # replicas held (ready or starting) x seconds: what the fleet is billed for
    events: float = 0.0  # offered over the run

    @property
    def replica_hours(self) -> float:
        return self.replica_s / 3600

    def cycles(self, after_s: float = 0.0) -> int:
        """How many times the fleet turned from scaling in to scaling out (or back) after `after_s`:
        a queue rule that oscillates shows many; a settled fleet, none."""
        turns, last = 0, 0
        previous = None
        for t, n in zip(self.t, self.target, strict=True):
            if t < after_s:
                previous = n
                continue
            if previous is not None and n != previous:
                direction = 1 if n > previous else -1
                turns += last != 0 and direction != last
                last = direction
            previous = n
        return turns

    def worst(self) -> Minute:
        return max(self.minutes, key=lambda m: (m.p99_ms, m.refused_share))

    def holds(self, p99_ms: float, max_refused: float) -> bool:
        """Every minute's p99 within `p99_ms` and its refused share within `max_refused`."""
        return all(m.p99_ms <= p99_ms and m.refused_share <= max_refused for m in self.minutes)


def admission_rule(rules: ScaleRules) -> AdmissionRule:
    return AdmissionRule(
        max_inflight=rules.max_inflight,
        max_queued=rules.max_queued,
        max_wait_s=rules.max_queue_wait_ms / 1000,
        target_s=rules.queue_target_ms / 1000,
        timeout_s=rules.request_timeout_ms / 1000,
        host_max_outstanding=rules.host_max_outstanding,
    )


class ReplicaWindows:
    """Replica windows by (path, rate bucket): each simulated once per run of the program."""

    def __init__(self, times: ServiceTimes, rule: AdmissionRule, seed: int) -> None:
        self.times, self.rule, self.seed = times, rule, seed
        self.cache: dict[tuple[str, int], tuple[ReplicaWindow, np.ndarray]] = {}

    def at(self, path: str, rate: float) -> tuple[ReplicaWindow, np.ndarray]:
        bucket = round(math.log(max(rate, 0.1)) / math.log(1.02))
        key = (path, bucket)
        if key not in self.cache:
            rate_b = 1.02**bucket
            rng = np.random.default_rng((self.seed, bucket, len(path)))
            rule = replace(self.rule, host_max_outstanding=0) if path in HOSTLESS else self.rule
            window = simulate_replica(
                rate_b, max(2.0, min(20.0, 4000 / rate_b)), self.times.cpu(path), self.times.io, rule, rng=rng
            )
            network = self.times.network[rng.integers(0, len(self.times.network), len(window.latencies_s))]
            self.cache[key] = (window, (window.latencies_s + network) * 1000)
        return self.cache[key]


def _weighted_quantiles(values: list[np.ndarray], weights: list[float], qs: tuple[float, ...]) -> list[float]:
    if not values:
        return [math.nan] * len(qs)
    v = np.concatenate(values)
    w = np.concatenate([np.full(len(a), wt / max(len(a), 1)) for a, wt in zip(values, weights, strict=True)])
    order = np.argsort(v)
    cum = np.cumsum(w[order])
    if not len(cum) or cum[-1] <= 0:
        return [math.nan] * len(qs)
    return [float(v[order][min(len(v) - 1, int(np.searchsorted(cum, q * cum[-1])))]) for q in qs]


@dataclass
class _Acc:
    """A minute being accumulated."""

    offered: float = 0.0
    answered: float = 0.0
    refused: float = 0.0
    ready_s: float = 0.0
    replicas_max: int = 0
    samples: dict[int, float] = field(default_factory=lambda: defaultdict(float))  # id(array) -> weight
    arrays: dict[int, np.ndarray] = field(default_factory=dict)

    def add(self, latencies: np.ndarray, weight: float) -> None:
        self.arrays[id(latencies)] = latencies
        self.samples[id(latencies)] += weight


def _queue_step(
    rate: float,
    ready: int,
    backlog: float,
    step_s: float,
    times: ServiceTimes,
    rules: ScaleRules,
    host_cpu_ratio: float,
    rng: np.random.Generator,
) -> tuple[float, float, np.ndarray, float, float]:
    """The queue path for one step: (served, new backlog, latency samples in ms, CPU utilisation, messages
    in service). KEDA's scaler reads the queue's active messages; a message locked by a replica's batch
    has not left the queue, so it counts (an assumption: docs/capacity.md)."""
    fixed = float(np.mean(times.queue_fixed))
    per_msg, size = times.queue_per_message_s, rules.max_message_batch
    capacity = size / (fixed + size * per_msg)  # messages/s of one replica, one batch at a time
    arriving = rate * step_s
    served = min(backlog + arriving, ready * capacity * step_s)
    after = backlog + arriving - served
    per_replica = min(served / step_s / max(ready, 1), capacity)
    batch = (
        size if per_replica * per_msg >= 1 else min(size, max(1.0, per_replica * fixed / (1 - per_replica * per_msg)))
    )
    n = 2000
    batch_s = times.queue_fixed[rng.integers(0, len(times.queue_fixed), n)] + batch * per_msg
    busy = min(1.0, per_replica * (fixed + batch * per_msg) / batch)
    ahead_s = (backlog + after) / 2 / (ready * capacity) if ready else math.inf
    latency = ahead_s + rng.random(n) * batch_s * busy + batch_s
    utilization = per_replica * times.queue_cpu_per_message_s * (1 + host_cpu_ratio) / max(rules.replica_vcpu, 1.0)
    return served, after, latency * 1000, min(1.0, utilization), ready * batch * busy


def simulate(
    scenario: Scenario,
    path: str,
    rules: ScaleRules,
    times: ServiceTimes,
    provisional: Provisional,
    *,
    step_s: float = 1.0,
    preroll_s: float = 900.0,
    seed: int = 11,
    windows: ReplicaWindows | None = None,
    fleet: str = "scheduled",
) -> Run:
    """Run `scenario` on `path` (one of PATHS) under `rules`, the
    sale met as `fleet` says (FLEETS).

    The fleet first runs `preroll_s` at the scenario's opening rate (not reported), so a run starts
    from the replicas the rules settle on, not from a cold `minReplicas`."""
    if path not in (*PATHS, *HOSTLESS):
        raise ValueError(f"path must be one of {PATHS} or {sorted(HOSTLESS)}, got {path!r}")
    if fleet not in FLEETS:
        raise ValueError(f"fleet must be one of {FLEETS}, got {fleet!r}")
    if fleet == "floor":
        rules = rules.with_(min_replicas=max(rules.min_replicas, rules.sale_replicas))
    sale_window = None
    if fleet == "scheduled" and scenario.burst is not None:
        sale_window = (scenario.burst[0] - rules.sale_lead_s, scenario.burst[1] + WINDOW_TAIL_S)
    rng = np.random.default_rng(seed)
    windows = windows or ReplicaWindows(times, admission_rule(rules), seed)
    control = Controller(rules, provisional, rng)
    run = Run(scenario.name, path, rules, fleet=fleet)
    acc, minute = _Acc(), 0
    http_window: list[tuple[float, float]] = []  # (t, requests) for the 15 s HTTP metric
    cpu_window: list[float] = []
    backlog, polled, next_poll, next_eval = 0.0, 0.0, -math.inf, -math.inf
    steps = int(scenario.seconds / step_s)
    for k in range(-int(preroll_s / step_s), steps):
        now = k * step_s
        offered = scenario.rate(max(now, 0.0) + step_s / 2)
        ready = max(control.ready(now), 1)
        if path == "servicebus":
            served, backlog, latencies, utilization, in_service = _queue_step(
                offered, ready, backlog, step_s, times, rules, provisional.host_cpu_ratio, rng
            )
            answered, refused = served, 0.0
        else:
            calls = offered / BATCH if path == "http-batch" else offered
            window, latencies = windows.at(path, calls / ready)
            answered = offered * step_s * len(window.latencies_s) / max(window.arrived, 1)
            refused = max(0.0, offered * step_s - answered)
            in_service = 0.0
            host = 0.0 if path in HOSTLESS else provisional.host_cpu_ratio
            utilization = min(1.0, window.busy * (1 + host) / rules.replica_vcpu)
            http_window.append((now, 0.0 if path in HOSTLESS else calls * step_s))
        cpu_window.append(utilization)
        if now >= next_poll:
            polled, next_poll = backlog + in_service, now + rules.polling_interval_s
        if now >= next_eval:
            horizon = now - PLATFORM.http_window_s
            http_window = [(t, n) for t, n in http_window if t > horizon]
            signals = Signals(
                http_rate=sum(n for _, n in http_window) / PLATFORM.http_window_s if path != "servicebus" else None,
                queue_depth=polled if path == "servicebus" else None,
                cpu_utilization=float(np.mean(cpu_window)) if cpu_window else 0.0,
                cron_replicas=rules.sale_replicas if sale_window and sale_window[0] <= now < sale_window[1] else 0,
            )
            cpu_window = []
            control.evaluate(now, signals)
            next_eval = now + PLATFORM.hpa_sync_s
        if now < 0:
            continue  # NOTE: the pre-roll only settles the fleet
        acc.add(latencies, answered)
        acc.answered += answered
        acc.refused += refused
        acc.offered += offered * step_s
        acc.ready_s += ready * step_s
        acc.replicas_max = max(acc.replicas_max, len(control.ready_at))
        run.replica_s += len(control.ready_at) * step_s
        run.events += offered * step_s
        run.t.append(now)
        run.rate.append(offered)
        run.ready.append(control.ready(now))
        run.target.append(len(control.ready_at))
        if (k + 1) * step_s >= (minute + 1) * 60 or k == steps - 1:
            run.minutes.append(_close(acc, minute, backlog))
            acc, minute = _Acc(), minute + 1
    return run


def _close(acc: _Acc, minute: int, backlog: float) -> Minute:
    keys = list(acc.arrays)
    p50, p99, p999 = _weighted_quantiles(
        [acc.arrays[k] for k in keys], [acc.samples[k] for k in keys], (0.5, 0.99, 0.999)
    )
    return Minute(
        minute=minute,
        offered=acc.offered / 60,
        p50_ms=p50,
        p99_ms=p99,
        p999_ms=p999,
        answered=acc.answered,
        refused=acc.refused,
        replicas_ready=acc.ready_s / 60,
        replicas_max=acc.replicas_max,
        queue_depth=backlog,
    )
