import asyncio

import pytest

from shared.stores.cache.singleflight import SingleFlight


async def test_followers_share_the_leaders_result() -> None:
    flights: SingleFlight[str, int] = SingleFlight()
    calls = 0

    async def work() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.02)
        return 7

    assert await asyncio.gather(*(flights.do("k", work) for _ in range(10))) == [7] * 10
    assert calls == 1 and flights.shared == 9


async def test_followers_share_the_leaders_error() -> None:
    flights: SingleFlight[str, int] = SingleFlight()

    async def fail() -> int:
        await asyncio.sleep(0.01)
        raise ValueError("backend down")

    results = await asyncio.gather(*(flights.do("k", fail) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, ValueError) for r in results)


async def test_a_cancelled_leader_does_not_cancel_its_followers() -> None:
    flights: SingleFlight[str, int] = SingleFlight()

    async def slow() -> int:
        await asyncio.sleep(0.05)
        return 1

    leader = asyncio.ensure_future(flights.do("k", slow))
    await asyncio.sleep(0.01)
    follower = asyncio.ensure_future(flights.do("k", slow))
    await asyncio.sleep(0.01)
    leader.cancel()
    assert await follower == 1  # it retried as the new leader
    with pytest.raises(asyncio.CancelledError):
        await leader
