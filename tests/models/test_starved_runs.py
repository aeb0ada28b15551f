"""A run starved of CPU is the machine's state, not the model's: it finishes when its CPU comes back.

At a replica's CPU limit the kernel stops the whole process for the rest of its period (CFS
throttling), and a flash sale is when replicas sit at that limit. A run stopped that way spans its
50 ms deadline on the wall clock while its thread barely ran. The watchdog leaves such a run to
finish (shared/models/bounds.py, `patient`), up to STARVED_GRACE deadlines, and then stops it as
`CpuStarved` (503, retry, its version not blamed); a run that uses its CPU past the deadline is
stopped at once, as before. Here the throttling is real: the child process running the model is
stopped with SIGSTOP mid-run and continued, as the kernel's throttle does (eight times).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from shared.errors import CpuStarved, RunOverBudget
from shared.models import bounds
from shared.models.onnx import OnnxModel
from shared.models.vetting import VettingPolicy
from shared.settings import OrtOptions
from tests.conftest import REPO
from tests.models import hostile

PAST_VETTING = VettingPolicy(static_shapes=False, extra_ops=frozenset({"ConstantOfShape", "Expand", "Tile", "Range"}))
OPTIONS = OrtOptions(run_deadline_ms=50, use_gpu=False)
STOPPED = RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true.")

# The child: a legitimate chain of ~40 ms of CPU a run under a 200 ms deadline (so the watchdog, which
# ticks every 25 ms, has seen a run before a stop lands in it, and a run that gets a quarter of a CPU
# cannot pass its deadline), scored back to back for `seconds`; one line of JSON at the end: how many
# runs, how many spanned a stop (over 300 ms of wall), and their errors. The chain is sized on the
# machine (`chain_links`): on a faster core a fixed one finishes within a watchdog tick of its CPU
# coming back, and the impatient watchdog never sees it past its deadline.
CHILD_OPTIONS = OrtOptions(run_deadline_ms=200, use_gpu=False)
RUN_CPU_S = 0.04
ROW = [[4.0, 0.0, 60.0, 1.0]]


def chain_links() -> int:
    """How many links make a run of ROW take RUN_CPU_S of CPU on this machine (`hostile.sized_links`)."""
    return hostile.sized_links(RUN_CPU_S, ROW[0][0])


CHILD = """
import json, sys, time
import numpy as np
from shared.models import bounds
from shared.models.onnx import OnnxModel
from tests.models import hostile
from tests.models.test_starved_runs import CHILD_OPTIONS, PAST_VETTING, ROW
if sys.argv[1] == "impatient":  # the mutation: arm every run as if it had no patience
    arm = bounds.RunWatchdog.arm
    bounds.RunWatchdog.arm = lambda self, deadline_s=None, patient=False: arm(self, deadline_s)
model = OnnxModel.load(hostile.slow_chain(links=int(sys.argv[3])), CHILD_OPTIONS, PAST_VETTING)
row = np.array(ROW, dtype=np.float32)
runs, spanned, errors = 0, 0, []
print("ready", flush=True)
until = time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    started = time.monotonic()
    try:
        model.predict(row)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {getattr(exc, 'detail', exc)}")
    runs += 1
    spanned += time.monotonic() - started > 0.3
print(json.dumps({"runs": runs, "spanned": spanned, "errors": errors}), flush=True)
"""


def throttled(mode: str, stops: int = 8, stop_s: float = 0.6) -> dict[str, object]:
    """Run the child, stop it `stops` times for `stop_s` each (the kernel's throttle), and read its report."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(0.5 + stops * (stop_s + 0.15)), str(chain_links())],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    for _ in range(stops):
        time.sleep(0.15)
        child.send_signal(signal.SIGSTOP)
        time.sleep(stop_s)
        child.send_signal(signal.SIGCONT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def test_a_run_stopped_by_the_kernel_mid_run_finishes_when_its_cpu_comes_back() -> None:
    report = throttled("patient")
    assert report["spanned"], f"no run was in flight when the process was stopped: {report}"
    assert report["errors"] == [], report


def test_without_patience_the_same_throttle_fails_runs() -> None:
    """The mutation check: the watchdog that stops a run at its wall deadline fails the same runs; a run
    the throttle stopped before the watchdog first saw it even reads as the model's (RunOverBudget:
    the rule before this one, which quarantined a good version on a throttled replica)."""
    report = throttled("impatient")
    assert report["errors"], f"the throttle failed no run without patience: {report}"


def hold(seconds: float, *, busy: bool) -> None:
    """Hold this thread `seconds`: spinning (a slow model) or asleep (a starved thread)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        if not busy:
            time.sleep(0.01)


def test_a_starved_run_is_stopped_past_its_grace_as_cpu_starved_and_not_blamed() -> None:
    model = OnnxModel.load(hostile.slow_chain(links=2), OPTIONS, PAST_VETTING)
    watchdog = bounds.RunWatchdog(0.05, starved_grace=6)  # 300 ms of wall for a starved run
    model._watchdog = watchdog
    options = watchdog.arm(patient=True)
    hold(0.15, busy=False)
    assert not options.terminate, "a starved run was stopped within its grace"
    hold(0.35, busy=False)
    assert options.terminate, "a starved run outlived its grace"
    error = model._run_error(STOPPED, options)
    assert isinstance(error, CpuStarved) and not isinstance(error, RunOverBudget)
    assert error.status == 503 and error.retryable and "starved of CPU for 300 ms" in error.detail
    watchdog.disarm(options)


def test_a_patient_run_that_uses_its_cpu_is_stopped_at_its_deadline_and_blamed() -> None:
    """Patience is for a thread that did not run: a model that spends its CPU is stopped as before."""
    model = OnnxModel.load(hostile.slow_chain(links=2), OPTIONS, PAST_VETTING)
    watchdog = bounds.RunWatchdog(0.05, starved_grace=100)
    model._watchdog = watchdog
    options = watchdog.arm(patient=True)
    started = time.perf_counter()
    while not options.terminate and time.perf_counter() - started < 2.0:
        pass
    assert options.terminate and time.perf_counter() - started < 0.5
    assert isinstance(model._run_error(STOPPED, options), RunOverBudget)
    watchdog.disarm(options)


def test_a_hostile_chain_is_still_stopped_within_its_deadline() -> None:
    """The whole run path (one thread, so patient): a chain of seconds stops near 50 ms."""
    model = OnnxModel.load(hostile.slow_chain(), OPTIONS, PAST_VETTING)
    started = time.perf_counter()
    with pytest.raises(RunOverBudget):
        model.predict(np.array([[12.0, 0.0, 60.0, 1.0]], dtype=np.float32))
    assert time.perf_counter() - started < 0.2
