"""A sandbox trial starved of CPU is the replica's state, not the file's: not a rejection, and tried again.

Every new file is tried in a child process first (shared/models/sandbox.py), and during a flash sale
a replica sits at its CPU limit: the kernel stops the whole process, the trial's child with it, for
the rest of each period (CFS throttling). A trial whose run stayed starved past its grace (warm-up's
`WarmupStarved`, an adversarial run's `CpuStarved`), or whose wall limit passed while it barely ran,
raises `WarmupStarved` (503, retryable): no `last_error`, and the next load of the same file tries it
again. A hostile file (a run it makes slow, its CPU limit, its memory) is still refused and remembered,
throttled or not. The throttling is real: this process stops and continues the trial's child
(SIGSTOP, SIGCONT), found among its own children in /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import onnx
import pytest

from shared.errors import WarmupStarved
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.sandbox import Sandbox, SandboxLimits
from shared.models.vetting import VettingPolicy
from shared.settings import BatchPolicy, OrtOptions
from tests.models import hostile
from tests.models.test_starved_runs import PAST_VETTING
from tests.models.test_starved_warmup import chain_links
from tests.onnx_models import make_model

DEADLINE_MS = 100.0  # the trial's run deadline: a starved run's grace is 20 of them (2 s); 75 ms of CPU is the model's
POLICY = VettingPolicy(
    static_shapes=False, extra_ops=PAST_VETTING.extra_ops, allowed_control_flow=frozenset({"Loop"})
)  # NOTE: past the static checks on purpose: the trial is the subject
STARVING = (0.49, 0.005)  # (stopped, running) seconds, over and over: ~1% of a CPU, a 40 ms run takes ~4 s of wall
Throttling = tuple[float, float] | None


def banded(default: float, low: float, high: float, description: str) -> bytes:
    """The banded chain (tests/models/hostile.py): ~40 ms of CPU a run on this machine (`chain_links`, the
    same 256 x 384 rows a link as the slow chain's) while features[0, 0] lies in (low, high), nothing
    outside; its log_amount defaults to `default`. A legitimate file: every run within its deadline.
    `description` makes the bytes a test's own (a file that passed is not tried again by this process)."""
    model = onnx.load_from_string(hostile.banded_chain(low, high, links=chain_links()))
    for prop in model.metadata_props:
        if prop.key == "serving.features":
            features = json.loads(prop.value)
            features[0]["default"] = default
            prop.value = json.dumps(features)
        elif prop.key == "serving.description":
            prop.value = description
    data: bytes = model.SerializeToString()
    return data


class Throttle(threading.Thread):
    """Finds this process's sandbox child (/proc) and throttles it until it is gone: from its first model
    run (its watchdog thread, started by the first run it arms, makes it two threads) `pattern` (stopped,
    running) seconds over and over; `hold`: stopped from when it is found, and left stopped."""

    def __init__(self, pattern: Throttling = STARVING, *, hold: bool = False) -> None:
        super().__init__(daemon=True)
        self.pattern, self.hold = pattern, hold
        self.stops = 0
        self.start()

    def run(self) -> None:
        pid = self._child()
        while self._alive(pid) and not self.hold and _threads(pid) < 2:
            time.sleep(0.001)
        while self._alive(pid):
            _signal(pid, signal.SIGSTOP)
            self.stops += 1
            if self.hold:
                while self._alive(pid):
                    time.sleep(0.01)
                return
            assert self.pattern is not None
            stopped, running = self.pattern
            time.sleep(stopped)
            _signal(pid, signal.SIGCONT)
            time.sleep(running)

    @staticmethod
    def _child() -> int:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                if entry.isdigit() and _is_trial(int(entry)):
                    return int(entry)
            time.sleep(0.001)
        raise AssertionError("no sandbox child appeared within 60 s")

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def done(self) -> int:
        """Join; the times the child was stopped."""
        self.join(timeout=120)
        assert not self.is_alive()
        return self.stops


def _is_trial(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return parent == os.getpid() and b"shared.models.sandbox" in cmdline.read()
    except (OSError, ValueError, IndexError):
        return False


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone meanwhile: nothing left to throttle
        os.kill(pid, signum)


@pytest.fixture(autouse=True)
def no_starved_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each load tries at once: these tests load again right after a starved one (the wait: test_registry_starved)."""
    monkeypatch.setattr("shared.models.registry.STARVED_WAIT_S", (0.0, 0.0))


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ModelRegistry]:
    """A registry over tmp_path whose trials run under DEADLINE_MS, as its own warm-up does."""
    sandbox = Sandbox(SandboxLimits(wall_s=60), POLICY, run_deadline_ms=DEADLINE_MS)
    options = OrtOptions(run_deadline_ms=DEADLINE_MS, use_gpu=False)
    found = ModelRegistry(
        DirectoryRepository(tmp_path), options, BatchPolicy(window_ms=5, max_size=8), sandbox=sandbox, vetting=POLICY
    )
    yield found
    await found.aclose()


def put(registry: ModelRegistry, models: Path, data: bytes) -> tuple[ModelRef, str]:
    """fraud/1 in the registry's directory `models`; its ref and source stamp."""
    ref = ModelRef("fraud", "1")
    (models / "fraud" / "1").mkdir(parents=True)
    (models / "fraud" / "1" / "model.onnx").write_bytes(data)
    return ref, registry.repository.stamp(ref)


def test_a_banded_chain_is_a_good_file_the_trial_passes_unthrottled() -> None:
    """The files the starved tests use: without throttling, they pass their trial."""
    sandbox = Sandbox(SandboxLimits(wall_s=60), POLICY, run_deadline_ms=DEADLINE_MS)
    assert sandbox.trial(banded(12.5, 12.0, 13.0, "unthrottled")).seconds > 0  # its warm-up runs are the slow ones
    assert 20 < sandbox.trial(banded(0.0, 0.5, 1.5, "unthrottled")).slowest_run_ms < DEADLINE_MS  # its probe at 1 is


@pytest.mark.parametrize(
    ("default", "band", "starved_in"),
    [
        (12.5, (12.0, 13.0), "warm-up starved of CPU 3 times in a row"),  # the warm-up runs do the work
        (0.0, (0.5, 1.5), "scoring the adversarial rows: a run was starved of CPU"),  # the probe at 1 does
    ],
    ids=["warm-up", "adversarial-run"],
)
async def test_a_trial_starved_past_its_grace_is_not_a_rejection_and_the_same_file_loads_once_the_cpu_is_back(
    registry: ModelRegistry, tmp_path: Path, default: float, band: tuple[float, float], starved_in: str
) -> None:
    ref, stamp = put(registry, tmp_path, banded(default, *band, description=starved_in))
    throttle = Throttle(STARVING)
    with pytest.raises(WarmupStarved, match=rf"the sandbox trial was starved of CPU \(.*\): {starved_in}"):
        await registry.load(ref)
    assert throttle.done() > 0
    assert registry.last_error("fraud") is None and not registry.rejected("fraud", "1", stamp)  # nothing recorded
    assert await registry.load(ref) is not None  # the CPU is back: the same file, tried again, serves
    assert registry.active("fraud").version == "1" and registry.last_error("fraud") is None


async def test_a_trial_whose_wall_limit_passes_while_it_is_stopped_is_starved_not_refused(tmp_path: Path) -> None:
    sandbox = Sandbox(SandboxLimits(wall_s=3), POLICY, run_deadline_ms=DEADLINE_MS)
    registry = ModelRegistry(
        DirectoryRepository(tmp_path), OrtOptions(use_gpu=False), BatchPolicy(max_size=8), sandbox=sandbox
    )
    ref, stamp = put(registry, tmp_path, make_model(bias=0.25, extra={"serving.description": "held"}))
    try:
        throttle = Throttle(hold=True)
        started = time.monotonic()
        with pytest.raises(WarmupStarved, match=r"starved of CPU \(.*wall 3 s.*\): it ran 0\.\d\d s of CPU time in"):
            await registry.load(ref)
        assert throttle.done() == 1 and time.monotonic() - started < 10
        assert registry.last_error("fraud") is None and not registry.rejected("fraud", "1", stamp)
        assert await registry.load(ref) is not None
    finally:
        await registry.aclose()


@pytest.mark.parametrize(
    ("data", "limits", "deadline_ms", "throttle", "reason"),
    [
        # a run the model makes endless, at a quarter of a CPU: it uses its deadline's CPU well within its grace
        (hostile.endless_loop(), SandboxLimits(wall_s=30), DEADLINE_MS, (0.03, 0.01), "past its 100 ms deadline"),
        (hostile.endless_loop(), SandboxLimits(cpu_s=2, wall_s=30), 600_000, None, "more than its 2 s of CPU time"),
        # at its wall limit having run about half of it: slow, not starved
        (hostile.endless_loop(), SandboxLimits(cpu_s=60, wall_s=3), 600_000, (0.01, 0.01), "did not finish in time"),
        (hostile.doubling(), SandboxLimits(wall_s=30), DEADLINE_MS, None, "memory cap"),
        (hostile.memory_bomb(), SandboxLimits(wall_s=30), DEADLINE_MS, None, "memory cap"),
    ],
    ids=["endless-run-throttled", "cpu-limit", "wall-limit-throttled", "doubling", "allocation-bomb"],
)
async def test_a_hostile_file_is_still_refused_and_remembered(
    tmp_path: Path, data: bytes, limits: SandboxLimits, deadline_ms: float, throttle: Throttling, reason: str
) -> None:
    sandbox = Sandbox(limits, POLICY, run_deadline_ms=deadline_ms)
    options = OrtOptions(use_gpu=False)
    registry = ModelRegistry(
        DirectoryRepository(tmp_path), options, BatchPolicy(max_size=8), sandbox=sandbox, vetting=POLICY
    )
    ref, stamp = put(registry, tmp_path, data)
    try:
        throttled = Throttle(throttle) if throttle is not None else None
        assert await registry.load(ref) is None  # refused
        assert throttled is None or throttled.done() > 0
        error = registry.last_error("fraud")
        assert error is not None and error.reason.startswith("refused by the sandbox") and reason in error.reason
        assert registry.rejected("fraud", "1", stamp)
        started = time.monotonic()
        assert await registry.load(ref) is None and time.monotonic() - started < 1  # skipped: no trial again
    finally:
        await registry.aclose()
