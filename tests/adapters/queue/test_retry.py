"""The queue's retry policy on a real event loop: an outage is waited out, never past the budget's share,
and nothing else is tried twice."""

from __future__ import annotations

import asyncio

import pytest

from shared.adapters.queue.retry import HOLD_FIRST_S, held, outage
from shared.errors import (
    DeadlineExceeded,
    InvalidEvent,
    ModelSourceError,
    NotReady,
    Overloaded,
    ResultStoreDown,
    ScoringError,
)


class Flaky:
    """A dependency that fails `fails` times with `error`, then answers."""

    def __init__(self, fails: int, error: ScoringError) -> None:
        self.calls, self.fails, self.error = 0, fails, error

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error
        return "answered"


def until(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


@pytest.mark.parametrize(
    ("error", "waited"),
    [
        (ResultStoreDown("down"), True),
        (NotReady("loading"), True),
        (ModelSourceError("source down"), True),
        (Overloaded("full"), False),  # the model queue has its own wait (score_within)
        (InvalidEvent("bad"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_only_a_dependency_down_or_not_ready_is_an_outage(error: ScoringError, waited: bool) -> None:
    assert outage(error) is waited


async def test_an_outage_is_waited_out_and_the_call_answers() -> None:
    call = Flaky(2, ResultStoreDown("down"))
    assert await held(until(5.0), call, "keeping results") == "answered"
    assert call.calls == 3


async def test_what_is_no_outage_is_raised_at_once() -> None:
    call = Flaky(1, InvalidEvent("bad"))
    with pytest.raises(InvalidEvent):
        await held(until(5.0), call, "keeping results")
    assert call.calls == 1


async def test_an_outage_longer_than_the_share_raises_its_last_failure_by_then() -> None:
    call = Flaky(10**6, ResultStoreDown("down"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ResultStoreDown):
        await held(until(0.3), call, "keeping results")
    assert loop.time() - started < 0.3 + 0.1 and call.calls >= 2  # waited, then gave up inside the share
    assert HOLD_FIRST_S < 0.3


async def test_a_hung_call_ends_at_the_share_with_the_step_named() -> None:
    async def hung() -> str:
        await asyncio.sleep(60)
        return "never"

    with pytest.raises(DeadlineExceeded, match="publishing outlasted the queue batch budget"):
        await held(until(0.1), hung, "publishing")


async def test_a_try_the_budget_cuts_names_the_failure_of_the_try_before() -> None:
    """A service whose start fails fast ("no models found"), then hangs: the batch's reason is still the
    cause, not only the cut (make test met a bare "outlasted" under load, where starts are slow)."""
    tries = 0

    async def start() -> str:
        nonlocal tries
        tries += 1
        if tries == 1:
            raise NotReady("no models found in models/")
        await asyncio.sleep(60)
        return "never"

    with pytest.raises(
        DeadlineExceeded, match=r"starting the service outlasted .*; the last try before: no models found"
    ):
        await held(until(0.5), start, "starting the service")
    assert tries == 2
