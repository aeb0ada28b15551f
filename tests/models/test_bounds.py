"""Every run is bounded at score time, whatever got past vetting and the sandbox.

Each hostile file here is harmless on its defaults (warm-up, golden rows) and sizes its work from
one event's value. The static checks refuse these files; here they are let through on purpose
(`PAST_VETTING`) to show the score-time bounds hold on their own: the memory cap refuses the
allocation before a byte is taken, the deadline stops the run between nodes, the version is
quarantined and the last good one answers, and the event loop answers within 100 ms throughout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from shared.errors import ModelInvalid, RunOverBudget
from shared.models import bounds
from shared.models.onnx import OnnxModel
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.vetting import VettingPolicy
from shared.settings import BatchPolicy, OrtOptions
from tests.models import hostile

MiB = 1024 * 1024
# NOTE: past the allow-list and the static-shape rule on purpose: the files reach the run, to meet its bounds
PAST_VETTING = VettingPolicy(static_shapes=False, extra_ops=frozenset({"ConstantOfShape", "Expand", "Tile", "Range"}))
OPTIONS = OrtOptions(run_deadline_ms=50, use_gpu=False)  # NOTE: the cap is the CPU arena's (a GPU has its own)


def rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def amount_row(log_amount: float) -> np.ndarray:
    return np.array([[log_amount, 0.0, 60.0, 1.0]], dtype=np.float32)


class LoopLag:
    """The longest the event loop took to come back to a 5 ms timer while a block ran (liveness's lag)."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_: object) -> None:
        await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst_s = max(self.worst_s, time.perf_counter() - started)


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "Range"])
def test_an_allocation_an_event_sizes_is_refused_by_the_memory_cap_before_it_is_taken(op: str) -> None:
    model = OnnxModel.load(hostile.input_sized(op), OPTIONS, PAST_VETTING)
    model.warm(8)  # the defaults make an empty tensor: harmless
    before = rss()
    with pytest.raises(RunOverBudget, match=rf"memory cap \(ORT_ARENA_MAX_MB\): {op} asked for 3072 MiB") as caught:
        model.predict(amount_row(12.0))  # ~160k: 3 GiB
    assert caught.value.limit == "memory"
    assert rss() - before < 100 * MiB


def test_without_the_memory_cap_the_same_event_takes_the_memory() -> None:
    """The mutation check of the cap: a session without the capped arena (as before) keeps what it took."""
    plain = ort.InferenceSession(
        hostile.input_sized("ConstantOfShape", scale=1 << 10), providers=["CPUExecutionProvider"]
    )
    before = rss()
    plain.run(None, {"features": amount_row(100.0)})  # 102,400 x 1024 floats: 400 MiB
    assert rss() - before > 300 * MiB
    capped = OnnxModel.load(hostile.input_sized("ConstantOfShape", scale=1 << 10), OPTIONS, PAST_VETTING)
    with pytest.raises(RunOverBudget):
        capped.predict(amount_row(100.0))


LONG_RUN = 36.0  # n = 2,304 rows: 1.5 s of the chain unstopped on this Xeon (2026-12; at 12.0, 0.45 s)


def test_a_run_past_its_deadline_is_stopped_between_nodes() -> None:
    model = OnnxModel.load(hostile.slow_chain(), OPTIONS, PAST_VETTING)
    model.warm(8)
    started = time.perf_counter()
    with pytest.raises(RunOverBudget, match=r"stopped past its 50 ms deadline") as caught:
        model.predict(amount_row(LONG_RUN))
    assert caught.value.limit == "deadline"
    assert time.perf_counter() - started < 0.1


def test_without_the_watchdog_the_same_run_holds_its_thread_for_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation check of the deadline: a watchdog that never fires lets the chain run to its end."""
    model = OnnxModel.load(hostile.slow_chain(), OPTIONS, PAST_VETTING)
    monkeypatch.setattr(bounds.RunWatchdog, "arm", lambda self, deadline_s=None, **_: ort.RunOptions())
    started = time.perf_counter()
    model.predict(amount_row(LONG_RUN))
    assert time.perf_counter() - started > 0.5


STOPPED = RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true.")


def held_past_the_deadline(watchdog: bounds.RunWatchdog, *, busy: bool) -> ort.RunOptions:
    """Arm a run on this thread and hold it 0.2 s: spinning (a slow model) or asleep (a starved thread)."""
    options = watchdog.arm()
    until = time.perf_counter() + 0.2
    while time.perf_counter() < until:
        if not busy:
            time.sleep(0.01)
    assert options.terminate  # the watchdog stopped it either way
    return options


def test_a_run_starved_of_cpu_is_not_blamed_on_its_model() -> None:
    """Past its deadline after barely running (CPU throttling): a failed batch, never a quarantine."""
    model = OnnxModel.load(hostile.slow_chain(links=2), OPTIONS, PAST_VETTING)
    options = held_past_the_deadline(model._watchdog, busy=False)  # type: ignore[arg-type]
    error = model._run_error(STOPPED, options)
    assert not isinstance(error, RunOverBudget) and "starved of CPU" in error.detail


def test_a_run_that_used_its_cpu_past_the_deadline_is_the_models() -> None:
    """The mutation check of the starvation rule: the same stop after a busy run is the model's."""
    model = OnnxModel.load(hostile.slow_chain(links=2), OPTIONS, PAST_VETTING)
    options = held_past_the_deadline(model._watchdog, busy=True)  # type: ignore[arg-type]
    assert isinstance(model._run_error(STOPPED, options), RunOverBudget)


@pytest.fixture
async def registry(models_dir: Path) -> AsyncIterator[ModelRegistry]:
    """fraud/1 (good) serving, fraud/2 (the slow chain) promoted over it, both past vetting."""
    repository = DirectoryRepository(models_dir)
    repository.publish(ModelRef("fraud", "2"), hostile.slow_chain())
    registry = ModelRegistry(repository, OPTIONS, BatchPolicy(max_size=8), vetting=PAST_VETTING, auto_promote=True)
    await registry.load_all()
    yield registry
    await registry.aclose()


async def test_a_version_that_trips_a_bound_is_quarantined_and_the_last_good_one_answers(
    registry: ModelRegistry,
) -> None:
    hostile_version = registry.active("fraud")
    assert hostile_version.version == "2"
    async with LoopLag() as lag:
        with pytest.raises(RunOverBudget):
            await hostile_version.score(amount_row(12.0)[0])
        rescored = await registry.active("fraud").score(amount_row(12.0)[0])
    assert lag.worst_s < 0.1, f"the loop was held {lag.worst_s * 1000:.0f} ms"
    assert registry.active("fraud").version == "1" and 0.0 <= rescored.value.score <= 1.0
    assert "deadline" in registry.quarantined("fraud")["2"]
    assert registry.last_error("fraud").reason.startswith("quarantined: ")  # type: ignore[union-attr]
    with pytest.raises(ModelInvalid, match="quarantined"):
        await registry.install("fraud", "2", hostile.slow_chain())
    assert await registry.load(ModelRef("fraud", "2")) is None


async def test_rows_queued_behind_the_tripped_run_never_run_on_it(registry: ModelRegistry) -> None:
    hostile_version = registry.active("fraud")
    tries = [asyncio.ensure_future(hostile_version.score(amount_row(12.0 + i)[0])) for i in range(20)]
    started = time.perf_counter()
    results = await asyncio.gather(*tries, return_exceptions=True)
    assert all(isinstance(r, RunOverBudget) for r in results), results
    assert time.perf_counter() - started < 0.3  # one stopped run, not one per queued batch
