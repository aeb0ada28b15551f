"""The canary judge as plain functions: an arm's rolling window, the verdict's bound and z test, the abort record."""

from __future__ import annotations

import pytest

from shared.fleet.canary import DECLINE, ERROR, Window, aborted, code, verdict, z
from shared.fleet.keys import CanaryRecord, LastAbort
from shared.settings import RolloutPolicy

POLICY = RolloutPolicy(canary_window=1000, canary_min_events=200, canary_max_decline_delta=0.05)


def arm(events: int, declines: int = 0, errors: int = 0, size: int = 1000) -> Window:
    """A window of `events` decisions: `errors` errors, then `declines` declines, the rest approvals."""
    window = Window(size)
    for i in range(events):
        window.add(ERROR if i < errors else DECLINE if i < errors + declines else 0)
    return window


def test_a_decision_is_coded_decline_error_or_neither() -> None:
    assert (code("decline"), code("error"), code("approve"), code("review")) == (DECLINE, ERROR, 0, 0)


def test_a_window_keeps_only_its_last_decisions() -> None:
    window = arm(10, declines=10, size=4)
    assert (window.events, window.declines, window.errors) == (4, 4, 0)
    for _ in range(3):
        window.add(ERROR)
    assert (window.events, window.declines, window.errors) == (4, 1, 3)
    assert window.shares() == (1.0, 0.75)  # the decline share leaves errors out


def test_an_empty_window_has_no_shares() -> None:
    assert Window(8).shares() == (None, None)


def test_no_verdict_before_both_arms_hold_the_minimum() -> None:
    assert verdict(POLICY, arm(1000, declines=100), arm(199, declines=199)) is None
    assert verdict(POLICY, arm(199), arm(1000, declines=1000)) is None
    assert verdict(POLICY, arm(1000, declines=100), arm(200, declines=60)) == "decline_share"


def test_a_difference_past_the_bound_but_within_noise_is_no_verdict() -> None:
    # 6 points more declines: past the 5-point bound, but on 200 decisions that is ~2.7 standard errors
    assert verdict(POLICY, arm(1000, declines=100), arm(200, declines=32)) is None


def test_a_difference_within_the_bound_is_no_verdict_however_certain() -> None:
    assert verdict(POLICY, arm(1000, declines=100), arm(1000, declines=140)) is None


def test_fewer_declines_trip_as_more_do() -> None:
    assert verdict(POLICY, arm(1000, declines=300), arm(200, declines=20)) == "decline_share"


def test_more_errors_trip_before_the_decline_share_is_weighed() -> None:
    assert verdict(POLICY, arm(1000, declines=100), arm(1000, declines=100, errors=30)) == "error_rate"
    assert verdict(POLICY, arm(1000, declines=100, errors=30), arm(1000, declines=100)) is None  # fewer: never


def test_an_arm_that_only_erred_is_judged_by_its_error_rate_alone() -> None:
    assert verdict(POLICY, arm(1000, declines=100), arm(200, errors=200)) == "error_rate"
    assert verdict(POLICY, arm(1000, errors=1000), arm(1000, errors=1000)) is None


def test_z_is_signed_and_zero_without_variance() -> None:
    assert z(0.2, 1000, 0.1, 1000) == pytest.approx(-z(0.1, 1000, 0.2, 1000))
    assert 4.5 < z(0.2, 1000, 0.1, 1000) < 7  # ~6.3: ten points on a thousand each is no noise
    assert z(0.2, 100, 0.1, 100) < 4.5  # on a hundred each it could be
    assert z(0.0, 100, 0.0, 100) == 0.0


def test_an_aborted_record_keeps_the_version_its_file_and_why() -> None:
    record = aborted(CanaryRecord("2", 0.3, 1.0, None, LastAbort("1", "api", 0.5), "ab" * 32), "error_rate", 9.0)
    assert (record.version, record.weight, record.sha256, record.running) == ("2", 0.0, "ab" * 32, False)
    assert record.aborted is not None and (record.aborted.reason, record.aborted.at) == ("error_rate", 9.0)
    assert record.last_abort == LastAbort("2", "error_rate", 9.0)
