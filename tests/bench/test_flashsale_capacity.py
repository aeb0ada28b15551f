"""The capacity command's search: rules that hold a burst the infra's refuse, with the smallest floor."""

from __future__ import annotations

import numpy as np

from bench.flashsale.arrivals import step
from bench.flashsale.capacity import size
from bench.flashsale.fleet import simulate
from bench.flashsale.infra import read_scale_rules
from bench.flashsale.inputs import PROVISIONAL, load_measured, service_times


def test_the_sized_rules_hold_a_burst_the_infra_refuses_and_no_lower_floor_does() -> None:
    times = service_times(load_measured(), n=20_000)
    rules = read_scale_rules()
    peak = 0.5 * rules.max_replicas / float(np.mean(times.single_cpu))  # half of what 12 workers do
    sale = step(peak, 3.0, before_min=1, hold_min=2)
    found = size("http-single", peak, 3.0, 50.0, rules, times, PROVISIONAL, scenario=sale, preroll_s=120)
    assert not found.current.holds(50.0, 0.001)
    assert found.holds and found.recommended is not None and found.recommended.holds(50.0, 0.001)
    assert found.rules.max_replicas > rules.max_replicas
    assert found.rules.http_concurrent_requests < found.knee  # scales out before a replica's knee
    lower = found.rules.with_(min_replicas=found.rules.min_replicas - 1)
    assert not simulate(sale, "http-single", lower, times, PROVISIONAL, preroll_s=120).holds(50.0, 0.001)
