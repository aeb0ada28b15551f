"""The replica simulation against this machine: one local process behind the open-loop generator.

bench/flashsale/measured.json holds `python -m bench.flashsale.measure`'s open-loop points (one
process of `make run`'s server with Redis, and two where the file has them; client-side latency
measured from each request's scheduled send). The simulation gets only what that file says a
request costs: the server's CPU per request at the highest rate (the marginal cost, the idle
process's own timers amortised away), the spread of the server-side time at the lowest rate,
and the client's fixed overhead (the lowest rate's client median less its server median). It
must then predict every point's p99 within max(3 ms, half the measured p99), and the share
refused within one percentage point. Stated tolerance, because the machine is shared: the load
generator, the server and other work run on the same 2 cores.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.flashsale.inputs import load_measured
from bench.flashsale.replica import AdmissionRule, simulate_replica
from shared.settings import AdmissionPolicy

MEASURED = load_measured()
POINTS = MEASURED["open_loop_one_process"]["points"]
RUNS = [
    (processes, point)
    for processes, key in ((1, "open_loop_one_process"), (2, "open_loop_two_processes"))
    if key in MEASURED
    for point in MEASURED[key]["points"]
]


def app_defaults() -> AdmissionRule:
    """The admission `make run` serves with: the settings' defaults (no host in front of it)."""
    policy = AdmissionPolicy()
    return AdmissionRule(
        max_inflight=policy.max_inflight,
        max_queued=policy.max_queued,
        max_wait_s=policy.max_queue_wait_ms / 1000,
        target_s=policy.queue_target_ms / 1000,
        timeout_s=policy.request_timeout_ms / 1000,
    )


@pytest.mark.parametrize(("processes", "point"), RUNS, ids=[f"{n}x-{p['offered']:.0f}rps" for n, p in RUNS])
def test_the_simulated_p99_and_refusals_match_the_measured_within_tolerance(
    processes: int, point: dict[str, float]
) -> None:
    lowest = POINTS[0]
    sigma = math.log(lowest["server_ms"]["0.99"] / lowest["server_ms"]["0.5"]) / 2.3263
    mean = POINTS[-1]["cpu_us_per_request"] * 1e-6
    rng = np.random.default_rng(17)
    cpu = mean * np.exp(sigma * rng.standard_normal(50_000) - sigma * sigma / 2)
    overhead_ms = lowest["p50_ms"] - lowest["server_ms"]["0.5"]
    # NOTE: the kernel spreads connections over the processes: each takes an even share
    windows = [
        simulate_replica(point["offered"] / processes, 10.0, cpu, np.zeros(1), app_defaults(), rng=rng)
        for _ in range(processes)
    ]
    latencies = np.concatenate([w.latencies_s for w in windows])
    simulated_p99 = float(np.quantile(latencies, 0.99)) * 1000 + overhead_ms
    assert simulated_p99 == pytest.approx(point["p99_ms"], abs=max(3.0, point["p99_ms"] / 2))
    refused = sum(w.shed + w.timed_out for w in windows) / sum(w.arrived for w in windows)
    assert refused == pytest.approx(point["refused"] / point["sent"], abs=0.01)
