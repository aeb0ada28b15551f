"""The replica simulation against queueing theory: results it must reproduce, not its own output.

- M/M/c (no admission cap, exponential service, c servers): the mean wait is Erlang C's
  C(c, a) / (c mu - lambda) (Kleinrock, Queueing Systems I, 1975, eq. 3.40);
- M/M/1/K (one slot, K - 1 waiting places, waits never run out): an arrival is refused with
  probability (1 - rho) rho^K / (1 - rho^(K+1)) (ibid., eq. 3.45): the admission queue's bound;
- the app's admission under overload, as shared/runtime/admission.py documents it: no answered
  request waited past MAX_QUEUE_WAIT_MS for a slot, and once the queue stands, waits stay near
  QUEUE_TARGET_MS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.flashsale.replica import AdmissionRule, simulate_replica

NO_CAP = AdmissionRule(max_inflight=0, max_queued=0, host_max_outstanding=0)


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    a = lam / mu
    tail = a**c / math.factorial(c) / (1 - a / c)
    waits = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return waits / (c * mu - lam)


@pytest.mark.parametrize(("servers", "rho"), [(1, 0.7), (4, 0.8)])
def test_the_mean_wait_of_an_m_m_c_queue_is_erlang_cs_within_7_percent(servers: int, rho: float) -> None:
    mu = 1000.0
    lam = rho * servers * mu
    rng = np.random.default_rng(2026)
    service = rng.exponential(1 / mu, 200_000)
    window = simulate_replica(lam, 120_000 / lam, service, np.zeros(1), NO_CAP, servers=servers, warmup_s=1.0, rng=rng)
    wait = window.latencies_s.mean() - 1 / mu
    assert wait == pytest.approx(
        erlang_c_wait(lam, mu, servers), rel=0.07
    )  # NOTE: seeds vary it by up to 4.4 % at this length
    assert window.busy == pytest.approx(rho, abs=0.01)
    assert window.shed == window.throttled == 0


def test_admissions_refusals_with_one_slot_are_m_m_1_ks_blocking_probability() -> None:
    mu, rho, places = 1000.0, 0.9, 5  # one in service, four waiting
    patient = AdmissionRule(max_inflight=1, max_queued=places - 1, max_wait_s=60.0, target_s=60.0, timeout_s=60.0)
    rng = np.random.default_rng(7)
    window = simulate_replica(rho * mu, 100.0, rng.exponential(1 / mu, 200_000), np.zeros(1), patient, rng=rng)
    blocking = (1 - rho) * rho**places / (1 - rho ** (places + 1))
    assert window.shed / window.arrived == pytest.approx(blocking, rel=0.06)


def test_under_overload_no_answered_request_waited_past_the_longest_wait() -> None:
    rule = AdmissionRule()  # MAX_INFLIGHT 16, MAX_QUEUED 64, 20 ms, 5 ms: infra's and the settings' defaults
    rng = np.random.default_rng(3)
    service = np.full(1000, 0.001)  # 1 ms of CPU: 1,000/s at most
    window = simulate_replica(2000.0, 5.0, service, np.zeros(1), rule, rng=rng)
    assert 0.4 < window.shed / window.arrived < 0.6  # half the offer is more than the CPU does
    # NOTE: a slot's holder waits for the CPU behind at most 15 others: 16 ms, plus its own wait
    assert window.latencies_s.max() <= rule.max_wait_s + 16 * 0.001 + 1e-9


def test_once_the_queue_stands_waits_stay_near_the_target() -> None:
    rule = AdmissionRule()
    rng = np.random.default_rng(5)
    service = np.full(1000, 0.001)
    standing = simulate_replica(1500.0, 5.0, service, np.zeros(1), rule, rng=rng)
    patient = simulate_replica(1500.0, 5.0, service, np.zeros(1), AdmissionRule(target_s=0.020), rng=rng)
    # NOTE: a standing queue admits a newcomer only if it will wait about QUEUE_TARGET_MS: the median drops
    assert np.median(standing.latencies_s) < np.median(patient.latencies_s) - 0.005
