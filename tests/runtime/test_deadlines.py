"""One sweeper keeps every deadline: an overrun is told apart from any other cancellation."""

from __future__ import annotations

import asyncio

import pytest

from shared.runtime.deadlines import Deadlines


async def wait(deadlines: Deadlines, seconds: float, event: asyncio.Event) -> str:
    task = deadlines.arm(seconds)
    try:
        await event.wait()
        return "done"
    except asyncio.CancelledError:
        if deadlines.expired(task):
            return "expired"
        raise
    finally:
        deadlines.disarm(task)


async def test_a_wait_past_its_deadline_is_cancelled_and_told_so() -> None:
    deadlines = Deadlines(tick_s=0.01)
    never = asyncio.Event()
    assert await asyncio.wait_for(wait(deadlines, 0.05, never), 2) == "expired"
    assert deadlines.armed == 0 and asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_wait_that_ends_in_time_is_left_alone_and_the_sweeper_stops() -> None:
    deadlines = Deadlines(tick_s=0.01)
    done = asyncio.Event()
    done.set()
    assert await wait(deadlines, 0.05, done) == "done"
    await asyncio.sleep(0.05)
    assert deadlines.armed == 0 and deadlines._sweeper is None


async def test_another_cancellation_is_not_taken_for_a_deadline() -> None:
    deadlines = Deadlines(tick_s=0.01)
    task = asyncio.create_task(wait(deadlines, 10, asyncio.Event()))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_waits_expire_each_on_its_own_deadline() -> None:
    deadlines = Deadlines(tick_s=0.01)
    never = asyncio.Event()
    results = await asyncio.gather(*(wait(deadlines, 0.02 * (i % 3 + 1), never) for i in range(30)))
    assert results == ["expired"] * 30
