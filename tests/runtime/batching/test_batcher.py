from __future__ import annotations

import asyncio
import time

import pytest

from shared.errors import BatchShapeError
from shared.runtime.batching.batcher import Batcher, BatcherClosed
from shared.settings import BatchPolicy


class Recorder:
    """A run function that records batch sizes and can be held open."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, items: list[int]) -> list[int]:
        self.sizes.append(len(items))
        if self.gate is not None:
            await self.gate.wait()
        return [i * 10 for i in items]


async def test_lone_request_on_idle_batcher_does_not_wait_for_the_window() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    started = time.perf_counter()
    done = await batcher.submit(3)
    assert done.value == 30 and done.batch_size == 1
    assert time.perf_counter() - started < 0.5  # far below the 1 s window


async def test_requests_of_one_tick_share_a_batch_and_keep_their_order() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    results = await asyncio.gather(*(batcher.submit(i) for i in range(8)))
    assert [r.value for r in results] == [i * 10 for i in range(8)]
    assert run.sizes == [8]


async def test_at_most_max_size_per_batch() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    await asyncio.gather(*(batcher.submit(i) for i in range(20)))
    assert run.sizes == [8, 8, 4]


async def test_batches_form_while_a_batch_runs() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    rest = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 4)]
    await asyncio.sleep(0.01)
    assert run.sizes == [1]  # the three wait for the running batch
    run.gate.set()
    await asyncio.gather(first, *rest)
    assert run.sizes == [1, 3]


async def test_full_batch_flushes_at_once_while_another_runs() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=4), max_concurrency=2)
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    full = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 5)]
    await asyncio.sleep(0.05)
    assert run.sizes == [1, 4]  # dispatched without waiting the 1 s window
    run.gate.set()
    await asyncio.gather(first, *full)


async def test_open_batch_is_dispatched_when_its_window_expires() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=500, max_size=8), max_concurrency=2)
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.005)
    assert run.sizes == [1]  # window still open (a stall of under 0.5 s cannot close it)
    for _ in range(500):
        if len(run.sizes) == 2:
            break
        await asyncio.sleep(0.01)
    assert run.sizes == [1, 1]
    run.gate.set()
    await asyncio.gather(first, second)


async def test_a_failing_run_fails_every_request_of_its_batch() -> None:
    async def boom(items: list[int]) -> list[int]:
        raise RuntimeError("model crashed")

    batcher = Batcher(boom, BatchPolicy(window_ms=5, max_size=8))
    results = await asyncio.gather(*(batcher.submit(i) for i in range(5)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)


async def test_wrong_number_of_results_is_a_shape_error_for_all() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    batcher = Batcher(short, BatchPolicy(window_ms=5, max_size=8))
    results = await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, BatchShapeError) for r in results)


async def test_batcher_keeps_serving_after_a_failed_batch() -> None:
    calls = 0

    async def flaky(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first batch fails")
        return items

    batcher = Batcher(flaky, BatchPolicy(window_ms=5, max_size=8))
    with pytest.raises(RuntimeError):
        await batcher.submit(1)
    assert (await batcher.submit(2)).value == 2


async def test_cancelled_request_is_skipped_and_others_complete() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    cancelled = asyncio.ensure_future(batcher.submit(1))
    kept = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)
    cancelled.cancel()
    run.gate.set()
    assert (await kept).value == 20
    await first
    assert run.sizes == [1, 1]


async def test_drain_finishes_queued_work_then_refuses_new_items() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    pending = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
    await asyncio.sleep(0.01)
    drained = asyncio.ensure_future(batcher.drain())
    await asyncio.sleep(0.01)
    assert not drained.done()
    run.gate.set()
    await drained
    assert [p.result().value for p in pending] == [0, 10, 20]
    with pytest.raises(BatcherClosed):
        await batcher.submit(9)


async def test_queue_time_is_reported() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.05)
    run.gate.set()
    await first
    assert (await second).queued_s >= 0.04


async def test_drain_returns_when_the_last_queued_request_was_cancelled() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    first = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)
    queued.cancel()
    drained = asyncio.ensure_future(batcher.drain())
    await asyncio.sleep(0.01)
    run.gate.set()
    await asyncio.wait_for(drained, 2.0)
    assert (await first).value == 0


async def test_a_lone_request_runs_in_its_own_task_without_the_dispatcher() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    assert (await batcher.submit(4)).value == 40
    assert batcher._dispatcher is None  # the lone path woke no dispatcher
    assert run.sizes == [1]


async def test_a_leader_cancelled_before_its_run_leaves_the_batcher_serving() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    leader = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0)  # the leader is in its one-tick wait
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert (await asyncio.wait_for(batcher.submit(1), 2.0)).value == 10
    assert run.sizes == [1]  # the cancelled leader's item never ran


async def test_cancelling_a_joined_leader_never_fails_the_requests_that_joined_it() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    leader = asyncio.ensure_future(batcher.submit(0))
    joined = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
    await asyncio.sleep(0.01)  # one batch of three is running, held at the gate
    assert run.sizes == [3]
    leader.cancel()
    await asyncio.sleep(0)
    run.gate.set()
    assert [(await j).value for j in joined] == [10, 20]
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_requests_queued_behind_a_lone_run_are_dispatched_after_it() -> None:
    run = Recorder()
    run.gate = asyncio.Event()
    batcher = Batcher(run, BatchPolicy(window_ms=1000, max_size=8))
    leader = asyncio.ensure_future(batcher.submit(0))
    await asyncio.sleep(0.01)  # running alone, held at the gate
    later = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2, 3)]
    await asyncio.sleep(0.01)
    run.gate.set()
    assert (await leader).value == 0
    assert [(await asyncio.wait_for(j, 2.0)).value for j in later] == [10, 20, 30]
    assert run.sizes == [1, 3]  # they waited as one batch, not for the 1 s window


async def test_under_load_requests_take_the_dispatchers_path_and_lone_ones_lead_again() -> None:
    run = Recorder()
    batcher = Batcher(run, BatchPolicy(window_ms=5, max_size=8))
    await asyncio.gather(*(batcher.submit(i) for i in range(3)))  # led, joined: one batch of three
    led = 0
    lead = batcher._lead

    async def counted(pending: object) -> object:
        nonlocal led
        led += 1
        return await lead(pending)  # type: ignore[arg-type]

    batcher._lead = counted  # type: ignore[method-assign]
    assert (await batcher.submit(5)).value == 50  # the last batch held three: the dispatcher's path
    assert led == 0
    assert (await batcher.submit(6)).value == 60  # the last ran alone: this one leads
    assert led == 1 and run.sizes == [3, 1, 1]
