"""Size a deployment: the replica floor and ceiling and the scale thresholds that hold a p99 target.

1. The knee: the highest rate one replica takes with its p99 (network included) within the target
   and its refused share within `max_refused` (replica windows, rates 2 % apart).
2. `maxReplicas` = ceil(burst x peak / knee): the burst's steady state fits.
3. Thresholds: the HTTP rule scales to ceil(rate / concurrentRequests), so `concurrentRequests`
   = knee x `UTILIZATION` scales out before a replica reaches its knee; the queue rule asks
   for a replica per `messageCount` waiting messages, so `messageCount` = what a replica drains
   within the target. The CPU rule keeps infra's value.
4. `minReplicas`: the smallest floor (binary search between 2 and `maxReplicas`) under which the
   step scenario (peak, `burst` x peak within a minute for 10 minutes) holds the target every minute.
5. The infra's current rules, run through the same scenario: do they hold it, and where not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bench.flashsale.arrivals import Scenario, step
from bench.flashsale.fleet import BATCH, ReplicaWindows, Run, admission_rule, simulate
from bench.flashsale.infra import ScaleRules
from bench.flashsale.inputs import Provisional, ServiceTimes

__all__ = ["UTILIZATION", "Sizing", "knee", "size"]

UTILIZATION = 0.7  # the HTTP threshold's share of the knee: headroom for bursts between evaluations


@dataclass
class Sizing:
    """What `size` found."""

    path: str
    knee: float  # events/s one replica takes within the target
    rules: ScaleRules  # the recommended rules (`holds` False: even a floor at the ceiling misses)
    recommended: Run | None
    current: Run
    holds: bool
    scenario: Scenario


def knee(path: str, windows: ReplicaWindows, p99_ms: float, max_refused: float) -> float:
    """The highest per-replica event rate whose p99 and refused share stay within the targets
    (coarse steps of ~25 %, then 2 % from the last rate that held)."""
    if path == "servicebus":
        raise ValueError("the queue path has no per-request knee: see size()")

    def holds(rate: float) -> bool:
        window, latencies = windows.at(path, rate)
        refused = 1 - len(window.latencies_s) / max(window.arrived, 1)
        p99 = float(np.quantile(latencies, 0.99)) if latencies.size else math.inf
        return p99 <= p99_ms and refused <= max_refused

    # NOTE: on the cache's grid of rates 2 % apart (1.02**k), 11 steps (~25 %) at a time, then one
    best, k = 0, math.floor(math.log(5.0) / math.log(1.02))
    for stride in (11, 1):
        k = best or k
        while 1.02**k < 200_000 and holds(1.02**k):
            best, k = k, k + stride
    return (1.02**best if best else 0.0) * (BATCH if path == "http-batch" else 1)


def size(
    path: str,
    peak: float,
    burst: float,
    p99_ms: float,
    rules: ScaleRules,
    times: ServiceTimes,
    provisional: Provisional,
    *,
    max_refused: float = 0.001,
    scenario: Scenario | None = None,
    preroll_s: float = 900.0,
) -> Sizing:
    """Steps 1-5 of the module docstring for `path` ("http-single", "http-batch" or "servicebus");
    `scenario` replaces the step (peak, burst x peak within a minute, for 10 minutes)."""
    scenario = scenario or step(peak, burst)
    windows = ReplicaWindows(times, admission_rule(rules), seed=11)

    def run(r: ScaleRules) -> Run:
        return simulate(scenario, path, r, times, provisional, windows=windows, preroll_s=preroll_s)

    current = run(rules)
    if path == "servicebus":
        return _size_queue(scenario, peak, burst, p99_ms, rules, times, current, run)
    per_replica = knee(path, windows, p99_ms, max_refused)
    if per_replica <= 0:
        return Sizing(path, 0.0, rules, None, current, False, scenario)
    ceiling = max(rules.min_replicas, math.ceil(burst * peak / per_replica) + 1)  # NOTE: +1: a replica lost at the peak
    calls = per_replica / (BATCH if path == "http-batch" else 1)
    base = rules.with_(max_replicas=ceiling, http_concurrent_requests=max(1, math.floor(calls * UTILIZATION)))
    return _floor_search(path, per_replica, base, p99_ms, max_refused, scenario, current, run)


def _floor_search(
    path: str,
    per_replica: float,
    base: ScaleRules,
    p99_ms: float,
    max_refused: float,
    scenario: Scenario,
    current: Run,
    run: Callable[[ScaleRules], Run],
) -> Sizing:
    low, high = 2, base.max_replicas
    best = run(base.with_(min_replicas=high))
    if not best.holds(p99_ms, max_refused):
        return Sizing(path, per_replica, base.with_(min_replicas=high), best, current, False, scenario)
    found = high
    while low < high:
        mid = (low + high) // 2
        trial = run(base.with_(min_replicas=mid))
        if trial.holds(p99_ms, max_refused):
            found, best, high = mid, trial, mid
        else:
            low = mid + 1
    return Sizing(path, per_replica, base.with_(min_replicas=found), best, current, True, scenario)


def _size_queue(
    scenario: Scenario,
    peak: float,
    burst: float,
    p99_ms: float,
    rules: ScaleRules,
    times: ServiceTimes,
    current: Run,
    run: Callable[[ScaleRules], Run],
) -> Sizing:
    """The queue path: a replica drains `maxMessageBatchSize / B'` messages/s, one batch at a time."""
    fixed = float(times.queue_fixed.mean())
    size = rules.max_message_batch
    per_replica = size / (fixed + size * times.queue_per_message_s)
    ceiling = max(rules.min_replicas, math.ceil(burst * peak / (per_replica * UTILIZATION)))
    message_count = max(1, math.floor(per_replica * p99_ms / 1000))
    base = rules.with_(max_replicas=ceiling, queue_messages_per_replica=message_count)
    return _floor_search("servicebus", per_replica, base, p99_ms, 1.0, scenario, current, run)
