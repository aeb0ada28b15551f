"""The fleet over time: the documented scaling steps, replicas that take time to start, and what
the measured service times make of a burst on each path."""

from __future__ import annotations

import numpy as np
import pytest

from bench.flashsale.arrivals import step
from bench.flashsale.fleet import simulate
from bench.flashsale.infra import ScaleRules, read_scale_rules
from bench.flashsale.inputs import PROVISIONAL, Provisional, ServiceTimes, Spread, load_measured, service_times
from bench.flashsale.scaling import Controller, Signals

FIXED = Provisional(replica_start_s=Spread(30.0, 30.0), node_start_s=Spread(200.0, 200.0))


@pytest.fixture(scope="module")
def times() -> ServiceTimes:
    return service_times(load_measured(), n=20_000)


def controller(rules: ScaleRules) -> Controller:
    return Controller(rules, FIXED, np.random.default_rng(1))


def test_scale_up_goes_1_4_then_doubles_up_to_the_desired_count() -> None:
    rules = read_scale_rules().with_(min_replicas=2, max_replicas=40, replicas_per_node=100)
    control = controller(rules)
    counts = []
    for n in range(5):
        control.evaluate(n * 15.0, Signals(http_rate=100 * rules.http_concurrent_requests))
        counts.append(len(control.ready_at))
    assert counts == [4, 8, 16, 32, 40]  # min(max, desired, max(4, 2 x current)), scale-app.md @ b73f868


def test_scale_down_waits_for_the_stabilization_window() -> None:
    rules = read_scale_rules().with_(min_replicas=2, max_replicas=40, replicas_per_node=100)
    control = controller(rules)
    busy = Signals(http_rate=10 * rules.http_concurrent_requests)
    for t in (0.0, 15.0, 30.0):
        control.evaluate(t, busy)
    assert len(control.ready_at) == 10
    for t in range(45, 331, 15):
        control.evaluate(float(t), Signals(http_rate=0.0))
    assert len(control.ready_at) == 10  # NOTE: 10 was still desired within the past 300 s
    control.evaluate(345.0, Signals(http_rate=0.0))
    assert len(control.ready_at) == rules.min_replicas


def test_a_replica_beyond_the_nodes_waits_for_a_node_then_its_start() -> None:
    rules = read_scale_rules().with_(min_replicas=3, max_replicas=12, replicas_per_node=3, readiness_period_s=5.0)
    control = controller(rules)
    control.evaluate(0.0, Signals(http_rate=4 * rules.http_concurrent_requests))
    assert len(control.ready_at) == 4
    assert control.ready(229.0) == 3  # the node (200 s), then the replica's start (30 s)
    assert control.ready(235.0) == 4  # and at most one readiness period


def test_a_queue_burst_past_capacity_builds_a_backlog_that_drains_after(times: ServiceTimes) -> None:
    rules = read_scale_rules()
    per_replica = rules.max_message_batch / (float(np.mean(times.queue_fixed)) + 64 * times.queue_per_message_s)
    peak = 0.5 * rules.max_replicas * per_replica
    run = simulate(step(peak, 3.0, before_min=1, hold_min=2), "servicebus", rules, times, PROVISIONAL)
    depths = [m.queue_depth for m in run.minutes]
    top = int(np.argmax(depths))
    assert depths[0] < 1_000 < depths[top]
    assert depths[-1] < depths[top]  # the burst's backlog drains at the peak's rate
    assert run.minutes[top].p99_ms > 10 * run.minutes[0].p99_ms
