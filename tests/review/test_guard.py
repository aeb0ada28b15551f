"""The bounds, on a clock the tests move: the bucket, the share budget, the breaker."""

from __future__ import annotations

from shared.review.guard import Breaker, ShareBudget, TokenBucket


def test_the_bucket_holds_under_a_burst_and_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=5, burst=5, now=0.0)
    assert sum(bucket.take(0.0) for _ in range(100)) == 5
    assert sum(bucket.take(0.5) for _ in range(100)) == 2  # 2.5 tokens earned in half a second
    assert sum(bucket.take(10.0) for _ in range(100)) == 5  # never more than the burst saved up


def test_the_share_budget_reviews_at_most_its_share() -> None:
    budget = ShareBudget(share=0.2, burst=2)
    reviewed = 0
    for _ in range(1000):
        budget.earn()
        reviewed += budget.spend()
    assert 200 <= reviewed <= 202  # the share, plus what was saved up at the start


def test_the_breaker_opens_after_failures_in_a_row_and_a_probe_closes_it() -> None:
    breaker = Breaker(failures=3, reset_s=10)
    for t in range(2):
        assert breaker.allow(t)
        breaker.failed(t)
    breaker.succeeded()  # a success resets the streak
    for t in range(3):
        breaker.failed(t)
    assert breaker.state == "open" and not breaker.allow(5.0)
    assert breaker.allow(12.5) and breaker.state == "half_open"
    assert not breaker.allow(12.6), "half-open lets one probe through, not a flood"
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.allow(12.7)
    assert breaker.opened == 1


def test_a_failed_probe_opens_it_again() -> None:
    breaker = Breaker(failures=1, reset_s=10)
    breaker.failed(0.0)
    assert breaker.allow(10.0)
    breaker.failed(10.0)
    assert breaker.state == "open" and not breaker.allow(19.9) and breaker.allow(20.0)
    assert breaker.opened == 2


def test_a_probe_not_made_after_all_frees_the_slot() -> None:
    breaker = Breaker(failures=1, reset_s=1)
    breaker.failed(0.0)
    assert breaker.allow(1.0)
    breaker.released()
    assert breaker.allow(1.0)


def test_retry_after_keeps_it_shut_that_long_even_below_the_failure_count() -> None:
    breaker = Breaker(failures=5, reset_s=1)
    breaker.failed(0.0, retry_after_s=30)
    assert breaker.state == "open" and not breaker.allow(29.0) and breaker.allow(30.0)
    assert breaker.open_for(10.0) == 0.0  # half-open now: no wait left
