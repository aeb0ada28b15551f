"""Background jobs start and stop with their owner, and a crash is restarted, not lost."""

from __future__ import annotations

import asyncio

import pytest

from shared.runtime.background import Background


async def test_jobs_run_after_start_and_are_cancelled_by_aclose() -> None:
    ticks: list[int] = []
    stopped = asyncio.Event()

    async def job() -> None:
        try:
            while True:
                ticks.append(1)
                await asyncio.sleep(0.001)
        finally:
            stopped.set()

    background = Background()
    background.add("ticker", job)
    await asyncio.sleep(0.01)
    assert ticks == []  # registered, not started
    background.start()
    await asyncio.sleep(0.01)
    assert ticks and background.running == ["ticker"]
    await background.aclose()
    assert stopped.is_set() and background.running == []


async def test_a_crashing_job_is_logged_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise RuntimeError("boom")
        await asyncio.Event().wait()

    background = Background(restart_s=0.001)
    background.start()
    background.add("flaky", flaky)  # added while running: starts at once
    for _ in range(200):
        if runs >= 3:
            break
        await asyncio.sleep(0.005)
    assert runs == 3 and background.restarts == {"flaky": 2}
    assert "background job flaky failed" in caplog.text
    await background.aclose()


def test_names_are_unique() -> None:
    async def job() -> None: ...

    background = Background()
    background.add("a", job)
    with pytest.raises(ValueError, match="exists"):
        background.add("a", job)


async def test_a_job_that_ignores_cancellation_does_not_block_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue  # swallows the cancellation, as a misbehaving client library might

    background = Background(stop_s=0.1)
    background.add("stubborn", stubborn)
    background.start()
    await asyncio.sleep(0.01)
    await asyncio.wait_for(background.aclose(), 2)
    assert "did not stop within" in caplog.text
    release.set()
