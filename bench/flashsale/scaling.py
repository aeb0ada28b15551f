"""KEDA and Container Apps deciding the replica count, as documented, and replicas taking time to start.

The rules (infra.ScaleRules, read from infra/) are evaluated every `hpa_sync_s`; each gives a desired
count `ceil(metric / target)` (scale-app.md @ b73f868, "Scaling algorithm"), the highest wins:
- http-concurrency: requests in the past 15 s divided by 15, per `concurrentRequests`;
- payments-queue-depth: the queue's active messages as last polled (every `pollingInterval`),
  per `messageCount`;
- cpu-all-ports: the ready replicas' mean CPU utilisation over the target (`value` %), times them;
- sale-window-N (KEDA `cron`, from the sale calendar): its `desiredReplicas` from start to end.
Scale-up moves to `min(maxReplicas, desired, max(4, 2 x current))` (the same page's worked
example); scale-down only to the highest count desired over the past 300 s (the scale-down
stabilization window). A replica added waits for room on a node (`replicasPerNode` per node; the
environment keeps `ceil(minReplicas / replicasPerNode)` nodes), then its start-up delay, then
up to one readiness period before the ingress sends it traffic (PROVISIONAL delays: inputs.py).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from bench.flashsale.infra import PLATFORM, ScaleRules
from bench.flashsale.inputs import Provisional

__all__ = ["Controller", "Signals"]


@dataclass
class Signals:
    """What the scalers see at an evaluation."""

    http_rate: float | None = None  # requests/s over the HTTP window (None: not an HTTP path)
    queue_depth: float | None = None  # active messages at the last poll (None: not the queue path)
    cpu_utilization: float = 0.0  # 0..1, mean over the ready replicas
    cron_replicas: int = 0  # a sale window's cron rule, while the window is open (its desiredReplicas)


@dataclass
class Controller:
    """The replica count over time: targets from the rules, replicas that become ready later."""

    rules: ScaleRules
    provisional: Provisional
    rng: np.random.Generator
    ready_at: list[float] = field(default_factory=list)  # one per replica, ready or starting
    nodes_ready_at: list[float] = field(default_factory=list)
    desired_log: deque[tuple[float, int]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        floor = self.rules.min_replicas
        self.ready_at = [-math.inf] * floor
        self.nodes_ready_at = [-math.inf] * math.ceil(floor / self.rules.replicas_per_node)

    def ready(self, now: float) -> int:
        return sum(1 for t in self.ready_at if t <= now)

    def desired(self, signals: Signals) -> int:
        """`ceil(metric / target)` for each rule, the highest, within the replica bounds."""
        rules, ready = self.rules, max(1, len(self.ready_at))
        wanted = [rules.min_replicas]
        if signals.http_rate is not None:
            wanted.append(math.ceil(signals.http_rate / rules.http_concurrent_requests))
        if signals.queue_depth is not None:
            wanted.append(math.ceil(signals.queue_depth / rules.queue_messages_per_replica))
        wanted.append(math.ceil(ready * signals.cpu_utilization / (rules.cpu_utilization_pct / 100)))
        wanted.append(signals.cron_replicas)  # NOTE: KEDA's cron scaler: its replicas inside the window, else none
        return min(rules.max_replicas, max(wanted))

    def evaluate(self, now: float, signals: Signals) -> int:
        """One evaluation: scale up at once (stepped), down only as the stabilization window allows."""
        desired = self.desired(signals)
        self.desired_log.append((now, desired))
        while self.desired_log and self.desired_log[0][0] < now - PLATFORM.scale_down_window_s:
            self.desired_log.popleft()
        current = len(self.ready_at)
        if desired > current:
            self._add(now, min(self.rules.max_replicas, desired, max(4, 2 * current)) - current)
        elif desired < current:
            keep = max(d for _, d in self.desired_log)
            if keep < current:
                self.ready_at = sorted(self.ready_at)[:keep]  # NOTE: the starting ones go first
        return desired

    def _add(self, now: float, count: int) -> None:
        per_node = self.rules.replicas_per_node
        for _ in range(count):
            slot = len(self.ready_at) // per_node
            if slot >= len(self.nodes_ready_at):
                self.nodes_ready_at.append(now + float(self.provisional.node_start_s.sample(self.rng, 1)[0]))
            start = max(now, self.nodes_ready_at[slot]) + float(self.provisional.replica_start_s.sample(self.rng, 1)[0])
            self.ready_at.append(start + float(self.rng.uniform(0, self.rules.readiness_period_s)))
