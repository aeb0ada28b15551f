"""A warm-up starved of CPU is the replica's state, not the file's: not a rejection, and tried again.

A new version is warmed on every replica that loads it (a Blob delivery, a sync pass, a start), and
during a flash sale replicas sit at their CPU limit: the kernel stops the whole process for the rest
of its period (CFS throttling). A warm-up run stopped that way past its grace is `CpuStarved`; warm-up
runs it again (WARM_TRIES in all) and then gives the load up as `WarmupStarved` (503, retryable): no
`last_error`, no quarantine, and the next load of the same file tries again. A run that fails or
trips a bound in warm-up still refuses the file (`ModelInvalid`, remembered). Here the throttling is
real, as in tests/models/test_starved_runs.py: the child process loading the model is stopped with
SIGSTOP and continued by this one.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import pytest

from shared.errors import ModelInvalid, WarmupStarved
from shared.models import onnx as onnx_adapter
from shared.models.bounds import STARVED_GRACE
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.settings import BatchPolicy, OrtOptions
from tests.conftest import REPO
from tests.models import hostile
from tests.models.test_starved_runs import PAST_VETTING
from tests.onnx_models import make_model

DEADLINE_MS = 100.0  # the child's ORT_RUN_DEADLINE_MS: the watchdog ticks every 25 ms
RUN_CPU_S = 0.04  # a warm-up run's CPU (the slow chain on its defaults, sized to it here): well within 100 ms
STARVING = (0.24, 0.01)  # (stopped, running) seconds, over and over: ~4% of a CPU, a 40 ms run needs ~1 s of wall
SLOWED = (0.09, 0.01)  # ~10% of a CPU: a 40 ms run takes ~0.4 s of wall, past its deadline, within the grace


def warm_chain(links: int, amount: float = 4.0) -> bytes:
    """The slow chain with `log_amount` defaulting to `amount`: its warm-up runs (the defaults) do the work."""
    model = onnx.load_from_string(hostile.slow_chain(links=links))
    for prop in model.metadata_props:
        if prop.key == "serving.features":
            features = json.loads(prop.value)
            features[0]["default"] = amount
            prop.value = json.dumps(features)
    return model.SerializeToString()


def chain_links() -> int:
    """How many links make a warm-up run take RUN_CPU_S of CPU on this machine (`hostile.sized_links`):
    a faster core would otherwise finish a run within a throttle's few running windows, and never starve."""
    return hostile.sized_links(RUN_CPU_S)


@pytest.fixture(autouse=True)
def no_starved_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each load tries at once: these tests load again right after a starved one (the wait: test_registry_starved)."""
    monkeypatch.setattr("shared.models.registry.STARVED_WAIT_S", (0.0, 0.0))


# The child: a registry over a directory holding fraud/1 (the warm chain); it prints "ready", then for each
# line read on stdin loads fraud/1 once and prints one line of JSON: the outcome, the registry's last_error
# and rejected() after it, and the wall time of each warm-up run. Every run stopped as starved is printed at
# once ("starved"), so the parent can let the CPU come back after the first. argv: the watchdog's grace (in
# deadlines) and the model directory.
CHILD = """
import asyncio, json, sys, time
from shared.errors import CpuStarved
from shared.models import bounds, onnx
from shared.models import registry as registry_module
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.settings import BatchPolicy, OrtOptions
from tests.models.test_starved_runs import PAST_VETTING
from tests.models.test_starved_warmup import DEADLINE_MS

onnx._watchdogs[DEADLINE_MS] = bounds.RunWatchdog(DEADLINE_MS / 1000, starved_grace=float(sys.argv[1]))
translate = onnx.OnnxModel._run_error
def run_error(self, exc, options):
    error = translate(self, exc, options)
    if isinstance(error, CpuStarved):
        print("starved", flush=True)
    return error
onnx.OnnxModel._run_error = run_error
predict, walls = onnx.OnnxModel.predict, []
def timed(self, matrix, deadline_s=None):
    started = time.monotonic()
    try:
        return predict(self, matrix, deadline_s)
    finally:
        walls.append(round(time.monotonic() - started, 3))
onnx.OnnxModel.predict = timed
registry_module.STARVED_WAIT_S = (0.0, 0.0)  # each load tries at once (the wait has its own test)

async def main():
    options = OrtOptions(run_deadline_ms=DEADLINE_MS, use_gpu=False)
    registry = ModelRegistry(
        DirectoryRepository(sys.argv[2]), options, BatchPolicy(window_ms=5, max_size=8), vetting=PAST_VETTING
    )
    ref = ModelRef("fraud", "1")
    stamp = registry.repository.stamp(ref)
    print("ready", flush=True)
    for _ in sys.stdin:
        walls.clear()
        try:
            outcome = "loaded" if await registry.load(ref) is not None else "refused"
        except Exception as exc:
            outcome = type(exc).__name__
        error = registry.last_error("fraud")
        print(json.dumps({
            "outcome": outcome,
            "last_error": None if error is None else error.reason,
            "rejected": registry.rejected("fraud", "1", stamp),
            "walls": walls,
        }), flush=True)
    await registry.aclose()

asyncio.run(main())
"""


class Child:
    """The child loading the model, its lines read as they come; stopped and continued from here."""

    def __init__(self, models: Path, grace: float) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(grace), str(models)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.starved = 0
        threading.Thread(target=self._read, daemon=True).start()
        assert self.line(timeout=60) == "ready"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def line(self, timeout: float) -> str:
        return self.lines.get(timeout=timeout)

    def load(self, throttle: tuple[float, float] | None = None, *, until_starved: bool = False) -> dict[str, object]:
        """Load the model once in the child, under `throttle` (stopped, running) until it answers (or,
        `until_starved`, until its first run stopped as starved: the CPU comes back then)."""
        assert self.process.stdin is not None
        self.process.stdin.write("load\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if throttle is not None:
                stopped, running = throttle
                self.process.send_signal(signal.SIGSTOP)
                time.sleep(stopped)
                self.process.send_signal(signal.SIGCONT)
                time.sleep(running)
            try:
                line = self.line(timeout=0 if throttle is not None else 1)
            except queue.Empty:
                continue
            if line == "starved":
                self.starved += 1
                if until_starved:
                    throttle = None
                continue
            report: dict[str, object] = json.loads(line)
            return report
        raise AssertionError("the child did not answer within 60 s")

    def close(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


@pytest.fixture
def chain_dir(tmp_path: Path) -> Path:
    (tmp_path / "fraud" / "1").mkdir(parents=True)
    (tmp_path / "fraud" / "1" / "model.onnx").write_bytes(warm_chain(chain_links()))
    return tmp_path


def test_a_warm_up_starved_past_its_grace_is_not_a_rejection_and_the_same_file_loads_once_the_cpu_is_back(
    chain_dir: Path,
) -> None:
    child = Child(chain_dir, grace=5)  # 0.5 s of wall for a starved run
    try:
        starved = child.load(STARVING)
        again = child.load()
    finally:
        child.close()
    assert starved["outcome"] == "WarmupStarved", starved  # raised to the caller: retryable, 503
    assert starved["last_error"] is None and starved["rejected"] is False, starved  # nothing against the file
    assert again["outcome"] == "loaded" and again["last_error"] is None, again
    assert child.starved == onnx_adapter.WARM_TRIES, (child.starved, starved)  # each try starved, then given up


def test_a_warm_up_run_starved_once_is_run_again_and_the_version_loads(chain_dir: Path) -> None:
    """The CPU comes back after the first starved run: the same load goes on and serves (the retry)."""
    child = Child(chain_dir, grace=5)
    try:
        report = child.load(STARVING, until_starved=True)
    finally:
        child.close()
    assert child.starved >= 1, report
    assert report["outcome"] == "loaded" and report["last_error"] is None, report


def test_a_warm_up_slowed_past_its_deadline_but_within_its_grace_loads(chain_dir: Path) -> None:
    """Patience, in warm-up too: runs throttled past their deadline, not past STARVED_GRACE, are not retried."""
    child = Child(chain_dir, grace=STARVED_GRACE)
    try:
        report = child.load(SLOWED)
    finally:
        child.close()
    walls = report["walls"]
    assert isinstance(walls, list)
    assert child.starved == 0 and report["outcome"] == "loaded", report
    assert max(walls) > DEADLINE_MS / 1000, f"no warm-up run was slowed past its deadline: {report}"


async def test_a_warm_up_over_its_deadline_is_still_a_rejection_remembered(tmp_path: Path) -> None:
    """A run that uses its CPU past the deadline is the model's: ModelInvalid, recorded, the file not retried."""
    (tmp_path / "fraud" / "1").mkdir(parents=True)
    (tmp_path / "fraud" / "1" / "model.onnx").write_bytes(warm_chain(links=400, amount=12.0))  # seconds of CPU
    options = OrtOptions(run_deadline_ms=50, use_gpu=False)
    registry = ModelRegistry(
        DirectoryRepository(tmp_path), options, BatchPolicy(window_ms=5, max_size=8), vetting=PAST_VETTING
    )
    ref = ModelRef("fraud", "1")
    try:
        assert await registry.load(ref) is None
        error = registry.last_error("fraud")
        assert error is not None and error.reason.startswith("warm-up failed: a run was stopped past its 50 ms"), error
        assert registry.rejected("fraud", "1", registry.repository.stamp(ref))
        with pytest.raises(ModelInvalid, match="warm-up failed"):
            await registry.install("fraud", "1", warm_chain(links=400, amount=12.0))
    finally:
        await registry.aclose()


async def test_a_start_skips_a_starved_version_for_now_and_a_later_load_serves_it(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The startup load: the other versions load (the replica starts), nothing is recorded against the
    starved one, and the next load (the poll's, the record watch's) serves it."""
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(make_model(bias=2.0, extra={"serving.description": "v2"}))
    warm = onnx_adapter.OnnxModel.warm
    starving = [True]

    def starved_once(model: onnx_adapter.OnnxModel, max_batch: int) -> None:
        if starving and model.spec.description == "v2":
            starving.clear()
            raise WarmupStarved("warm-up starved of CPU 3 times in a row (a test)")
        warm(model, max_batch)

    monkeypatch.setattr(onnx_adapter.OnnxModel, "warm", starved_once)
    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(use_gpu=False), BatchPolicy(max_size=8))
    try:
        await registry.load_all()
        assert registry.loaded_versions("fraud") == ["1"] and registry.last_error("fraud") is None
        assert await registry.load(ModelRef("fraud", "2")) is not None
        assert registry.loaded_versions("fraud") == ["1", "2"] and registry.active("fraud").version == "2"
    finally:
        await registry.aclose()
