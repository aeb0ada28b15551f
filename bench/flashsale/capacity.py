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
from bench.flashsale.fleet import BATCH, HOSTLESS, PATHS, ReplicaWindows, Run, admission_rule, simulate
from bench.flashsale.infra import ScaleRules
from bench.flashsale.inputs import Provisional, ServiceTimes

__all__ = ["QUEUE_P99_MS", "UTILIZATION", "Profile", "Sizing", "in_service", "knee", "size", "size_profile"]

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
    base = rules.with_(max_replicas=ceiling)
    if path not in HOSTLESS:  # NOTE: the HTTP rule never counts a hostless door's events: it keeps its threshold
        base = base.with_(http_concurrent_requests=max(1, math.floor(calls * UTILIZATION)))
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


# -- the sale profile: every path, the sale window, one set of rules ------------------------------

QUEUE_P99_MS = 250.0  # the queue path's target, enqueue to published (issue 53)


@dataclass
class Profile:
    """The figures main.bicep's `var profiles` holds for one profile (names as there)."""

    minReplicas: int  # NOTE: the names main.bicep declares
    maxReplicas: int
    httpConcurrentRequests: int
    queueMessagesPerReplica: int
    saleReplicas: int
    saleLeadMinutes: int

    def apply(self, rules: ScaleRules) -> ScaleRules:
        return rules.with_(
            min_replicas=self.minReplicas,
            max_replicas=self.maxReplicas,
            http_concurrent_requests=self.httpConcurrentRequests,
            queue_messages_per_replica=self.queueMessagesPerReplica,
            sale_replicas=self.saleReplicas,
            sale_lead_s=self.saleLeadMinutes * 60.0,
        )


def queue_capacity(times: ServiceTimes, rules: ScaleRules) -> float:
    """Messages/s one replica drains, one batch of `maxMessageBatchSize` at a time."""
    size = rules.max_message_batch
    return size / (float(times.queue_fixed.mean()) + size * times.queue_per_message_s)


def in_service(times: ServiceTimes, rules: ScaleRules, rate: float) -> float:
    """Messages a replica holds (locked, still active for KEDA) when `rate` messages/s reach it and
    the queue is drained: the batch that gathers during a batch's fixed time, as fleet.py models it."""
    fixed, per_msg, size = float(times.queue_fixed.mean()), times.queue_per_message_s, rules.max_message_batch
    if rate * per_msg >= 1:
        return float(size)
    return min(size, max(1.0, rate * fixed / (1 - rate * per_msg)))


def lead_minutes(provisional: Provisional) -> int:
    """How long before a burst the sale window opens: a node's and a replica's start at their p99,
    an evaluation and a readiness period, rounded up to 5 minutes."""
    seconds = provisional.node_start_s.p99 + provisional.replica_start_s.p99 + 30
    return int(5 * math.ceil(seconds / 300))


def size_profile(
    peak: float,
    burst: float,
    rules: ScaleRules,
    times: ServiceTimes,
    provisional: Provisional,
    *,
    p99_ms: float = 50.0,
    queue_p99_ms: float = QUEUE_P99_MS,
    max_refused: float = 0.001,
    preroll_s: float = 900.0,
    doors: tuple[str, ...] = PATHS,
) -> Profile:
    """The sale profile: thresholds from one replica's knee, a sale window that holds the step on
    every path of `doors` (the ways traffic comes in: every path, or a fleet whose clients take the
    gRPC stream, `("grpc-stream", "servicebus")`), and the smallest floor that holds the rest
    (steady, ramp) by reacting.

    - `httpConcurrentRequests` = 0.7 x the single-event knee (the rule reads requests/s);
    - `queueMessagesPerReplica` = what a replica holds in service at 0.7 of its drain rate: a drained
      queue still asks for the replicas the traffic needs, so the rule neither scales in below the
      load nor oscillates (a threshold above a replica's batch can never be met by a drained queue);
    - `saleReplicas`: the smallest floor under which the step holds on every path (the window's
      cron rule sets it from `saleLeadMinutes` before the burst); `maxReplicas` one above it or the
      burst's knee count, whichever is more;
    - `minReplicas`: the replicas the peak needs on the queue path at 0.7 of their drain rate (a
      drained queue then never asks for fewer than the traffic needs), or more where steady peak and
      the 30-minute ramp need more to hold on every path with no window."""
    from bench.flashsale.arrivals import ramp, steady

    windows = ReplicaWindows(times, admission_rule(rules), seed=11)
    single = knee("http-single", windows, p99_ms, max_refused)
    queued = "servicebus" in doors
    front = min([knee(door, windows, p99_ms, max_refused) for door in doors if door != "servicebus"] or [math.inf])
    drain = queue_capacity(times, rules)
    per_replica_peak = min(front, drain * UTILIZATION if queued else math.inf)
    base = rules.with_(
        http_concurrent_requests=max(1, math.floor(single * UTILIZATION)),
        queue_messages_per_replica=max(1, math.floor(in_service(times, rules, drain * UTILIZATION))),
        max_replicas=max(2, math.ceil(burst * peak / per_replica_peak) + 1),
        sale_lead_s=lead_minutes(provisional) * 60.0,
    )

    def holds(r: ScaleRules, scenario: Scenario, fleet: str) -> bool:
        for path in doors:
            target = queue_p99_ms if path == "servicebus" else p99_ms
            refused = 1.0 if path == "servicebus" else max_refused
            run = simulate(scenario, path, r, times, provisional, windows=windows, preroll_s=preroll_s, fleet=fleet)
            if not run.holds(target, refused):
                return False
        return True

    def smallest(low: int, high: int, ok: Callable[[int], bool]) -> int:
        while low < high:
            mid = (low + high) // 2
            if ok(mid):
                high = mid
            else:
                low = mid + 1
        return low

    sale = step(peak, burst)
    ceiling = base.max_replicas
    sale_replicas = smallest(2, ceiling, lambda n: holds(base.with_(min_replicas=n, sale_replicas=n), sale, "floor"))
    base = base.with_(sale_replicas=sale_replicas, max_replicas=max(ceiling, sale_replicas + 1))
    quiet = (steady(peak), ramp(peak, burst))
    # NOTE: a drained queue's depth is the messages in service, ~ rate x a batch's time, which barely
    # moves with the replica count: the rule alone settles on no count and dithers by one replica
    # (scale in after 300 s, out again at the next poll). The floor carries the peak instead.
    queue_floor = math.ceil(peak / (drain * UTILIZATION)) if queued else 2
    per_replica = base.queue_messages_per_replica
    while queued and math.ceil(queue_floor * in_service(times, rules, peak / queue_floor) / per_replica) > queue_floor:
        queue_floor += 1  # NOTE: up to where the drained queue asks for no more than the floor holds
    floor = smallest(
        queue_floor, sale_replicas, lambda n: all(holds(base.with_(min_replicas=n), s, "reactive") for s in quiet)
    )
    return Profile(
        minReplicas=floor,
        maxReplicas=base.max_replicas,
        httpConcurrentRequests=base.http_concurrent_requests,
        queueMessagesPerReplica=base.queue_messages_per_replica,
        saleReplicas=sale_replicas,
        saleLeadMinutes=lead_minutes(provisional),
    )
