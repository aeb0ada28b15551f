"""The trial of a new model file: load, warm and golden-check it in a child process first.

What a static check cannot see, running shows: a graph large or slow on every input, a Loop
that never ends. So every new file is first loaded, warmed and golden-checked (`OnnxModel.load`
+ `warm`, the serving code itself), then scored as an attacker would (`shared.models.probes`:
each feature at its extremes, zeros, NaN, the infinities, a full batch) under the serving
bounds (ORT_RUN_DEADLINE_MS per run, ORT_ARENA_MAX_MB of arena: shared/models/bounds.py), by a
child process (`python -m shared.models.sandbox`) that holds:

    memory      RLIMIT_AS (`SandboxLimits.memory_bytes`): an allocation past it fails in the child
    CPU time    RLIMIT_CPU (`cpu_s`): the kernel stops a spinning child
    wall clock  `wall_s`: the parent kills the child's process group
    network     a new user + network namespace when the kernel allows one (best effort: the
                verdict says whether it held); custom-op domains are refused before, in any case
    files       a scratch working directory, removed after; an environment with no secrets
    devices     the CPU provider only (the cap covers host memory, not a GPU's)

Only a file that passes is loaded into the serving process, which meanwhile only waits on a
pipe in a worker thread: its memory and its event loop never pay for a hostile file. The
child is started with fork+exec (no copy of the serving process's memory). A file that
passed is not tried again by the same process (the same bytes under the same limits).

A trial starved of CPU (a replica throttled at its CPU limit, as in a flash sale) says nothing
about the file, so it is not refused: it raises `WarmupStarved` (503, retryable; the registry
records nothing and the next load tries the file again) when a run in the child stayed starved
past its grace (its warm-up's `WarmupStarved`, an adversarial run's `CpuStarved`: bounds.py), or
when the child reached its wall limit having run under STARVED_SHARE of it (and of its CPU limit)
in CPU time, as the kernel tells on reaping it. Past its CPU limit, its memory, a crash or a run
the model made slow or large, it is refused (`ModelInvalid`) as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import ModelInvalid, WarmupStarved
from shared.models.vetting import DEFAULT_POLICY, VettingPolicy

__all__ = ["Sandbox", "SandboxLimits", "Verdict", "child_env"]

ROOT = Path(__file__).resolve().parents[2]  # the repository (or app) root: the child imports `shared` from it
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
# NOTE: a trial at its wall limit that ran under this share of it (and of its CPU limit) in CPU time was waiting
# for a CPU, not running the model: the watchdog's rule for a run it cannot read alone (shared/models/bounds.py)
STARVED_SHARE = 0.25
_passed: dict[tuple[str, tuple[str, ...]], Verdict] = {}  # (sha256, argv) -> the trial it passed
_passed_guard = threading.Lock()


@dataclass(frozen=True)
class SandboxLimits:
    """What one trial may use."""

    memory_bytes: int = 1024 * 1024 * 1024
    cpu_s: int = 30
    wall_s: float = 60.0

    def __post_init__(self) -> None:
        if self.memory_bytes < 256 * 1024 * 1024:
            raise ValueError("SandboxLimits.memory_bytes must be >= 256 MiB (Python and onnxruntime need ~300 MiB)")
        if self.cpu_s < 1 or self.wall_s <= 0:
            raise ValueError("SandboxLimits.cpu_s must be >= 1 and wall_s > 0")


@dataclass(frozen=True)
class Verdict:
    """A passed trial: how long it took, whether the network was cut, and what its adversarial runs showed."""

    seconds: float
    network_isolated: bool
    max_score: float = 0.0  # the highest finite score the trial's rows produced
    slowest_run_ms: float = 0.0  # the slowest of its runs
    peak_rss_mb: float = 0.0  # the child's peak resident memory


@dataclass
class Sandbox:
    """Tries model files in a child process under `limits` (`ModelInvalid` with the reason if one fails,
    `WarmupStarved` if the trial was starved of CPU: the file not blamed)."""

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    policy: VettingPolicy = DEFAULT_POLICY
    max_batch: int = 8
    graph_optimization: str = "all"
    run_deadline_ms: float = 50.0  # ORT_RUN_DEADLINE_MS: a trial run past it is refused
    arena_max_mb: int = 64  # ORT_ARENA_MAX_MB: a trial run past it is refused

    def trial(self, data: bytes) -> Verdict:
        """Load, warm and golden-check `data` in a child; blocking (call it off the event loop)."""
        key = (hashlib.sha256(data).hexdigest(), tuple(self._argv()))
        with _passed_guard:
            if key in _passed:
                return _passed[key]
        started = time.perf_counter()
        answer = self._run(data)
        verdict = Verdict(
            time.perf_counter() - started,
            bool(answer.get("network_isolated")),
            float(answer.get("max_score", 0.0)),
            float(answer.get("slowest_run_ms", 0.0)),
            float(answer.get("peak_rss_mb", 0.0)),
        )
        with _passed_guard:
            _passed[key] = verdict
        return verdict

    def _argv(self) -> list[str]:
        limits = self.limits
        allowed = ",".join(sorted(self.policy.allowed_control_flow))
        return [
            sys.executable,
            "-m",
            "shared.models.sandbox",
            str(limits.memory_bytes),
            str(limits.cpu_s),
            str(self.max_batch),
            self.graph_optimization,
            str(self.policy.max_nodes),
            str(self.policy.max_initializer_elements),
            allowed,
            "1" if self.policy.static_shapes else "0",
            ",".join(sorted(self.policy.extra_ops)),
            str(self.run_deadline_ms),
            str(self.arena_max_mb),
        ]

    def _run(self, data: bytes) -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="model-trial-") as scratch:
            child = subprocess.Popen(  # noqa: S603 this interpreter and this module: a fixed argv, no shell
                self._argv(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=scratch,
                env=child_env(),
                start_new_session=True,  # its own process group, killed whole at the deadline
            )
            try:
                out, err = child.communicate(data, timeout=self.limits.wall_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)  # reaped here: the kernel counts its CPU time
                child.returncode = os.waitstatus_to_exitcode(status)
                child.communicate()
                raise self._overdue(usage.ru_utime + usage.ru_stime) from None
        return self._verdict(child.returncode, out, err)

    def _overdue(self, cpu_s: float) -> ModelInvalid | WarmupStarved:
        """A trial killed at its wall limit: refused, unless it ran under STARVED_SHARE of its time (starved)."""
        limits = self.limits
        if cpu_s < STARVED_SHARE * min(limits.wall_s, limits.cpu_s):
            return WarmupStarved(
                f"the sandbox trial was starved of CPU ({self._caps()}): it ran {cpu_s:.2f} s of CPU time "
                f"in its {limits.wall_s:g} s; not the file's fault: its next load tries again"
            )
        return ModelInvalid(f"refused by the sandbox ({self._caps()}): loading and warm-up did not finish in time")

    def _verdict(self, code: int, out: bytes, err: bytes) -> dict[str, float]:
        try:
            answer = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if isinstance(answer, dict) and answer.get("ok") is True and code == 0:
            return answer
        if isinstance(answer, dict) and answer.get("starved") is True and isinstance(answer.get("reason"), str):
            raise WarmupStarved(f"the sandbox trial was starved of CPU ({self._caps()}): {answer['reason'][:300]}")
        if isinstance(answer, dict) and isinstance(answer.get("reason"), str):
            raise ModelInvalid(f"refused by the sandbox ({self._caps()}): {answer['reason'][:300]}")
        raise ModelInvalid(f"refused by the sandbox ({self._caps()}): {self._death(code, err)}")

    def _caps(self) -> str:
        limits = self.limits
        return (
            f"memory {limits.memory_bytes >> 20} MiB, CPU {limits.cpu_s} s, wall {limits.wall_s:g} s, "
            f"runs {self.run_deadline_ms:g} ms and {self.arena_max_mb} MiB"
        )

    def _death(self, code: int, err: bytes) -> str:
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return f"the trial used more than its {self.limits.cpu_s} s of CPU time (or was killed)"
        what = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        last = (err.decode(errors="replace").strip().splitlines() or [""])[-1][:200]
        return f"the trial process died ({what}){': ' + last if last else ''}"


def child_env() -> dict[str, str]:
    """No secrets (no connection strings, no identity endpoint settings): only where to find code.

    The child imports what this process imports: under the Functions worker the app's
    packages are on `sys.path` through the worker, not through the interpreter's site-packages.
    """
    path = dict.fromkeys([str(ROOT), *(p for p in sys.path if p and os.path.isdir(p))])
    return {"PATH": os.defpath, "PYTHONPATH": os.pathsep.join(path), "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1"}


# -- the child ------------------------------------------------------------------------------


def _confine(memory_bytes: int, cpu_s: int) -> bool:
    """Cap memory and CPU time, and cut the network where the kernel lets an unprivileged process."""
    import ctypes
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)) == 0
    except (OSError, AttributeError):
        return False


def _child(argv: list[str]) -> int:
    memory, cpu, max_batch, optimization, max_nodes, max_elements, allowed, static, extra, deadline, arena = argv
    isolated = _confine(int(memory), int(cpu))
    data = sys.stdin.buffer.read()
    import resource

    from shared.errors import CpuStarved, RunOverBudget, ScoringError
    from shared.models.onnx import OnnxModel
    from shared.models.probes import attack
    from shared.policies import OrtOptions

    policy = VettingPolicy(
        int(max_nodes),
        int(max_elements),
        frozenset(filter(None, allowed.split(","))),
        static == "1",
        frozenset(filter(None, extra.split(","))),
    )
    options = OrtOptions(
        graph_optimization=optimization,  # type: ignore[arg-type]
        use_gpu=False,
        run_deadline_ms=float(deadline),
        arena_max_mb=int(arena),
    )
    try:
        model = OnnxModel.load(data, options, policy, cpu_only=True)
        model.warm(int(max_batch))
        found = attack(model.predict, model.spec, int(max_batch))
    except WarmupStarved as exc:  # NOTE: runs starved past their grace: the CPU's state, not the file's
        print(json.dumps({"ok": False, "starved": True, "reason": exc.detail}))
        return 1
    except CpuStarved as exc:  # an adversarial run (warm-up's own are `WarmupStarved`)
        print(json.dumps({"ok": False, "starved": True, "reason": f"scoring the adversarial rows: {exc.detail}"}))
        return 1
    except RunOverBudget as exc:
        print(json.dumps({"ok": False, "reason": f"{exc.detail} (a bound every replica holds each run to)"}))
        return 1
    except ScoringError as exc:
        print(json.dumps({"ok": False, "reason": exc.detail}))
        return 1
    except MemoryError:
        print(json.dumps({"ok": False, "reason": f"out of memory under the cap of {int(memory) >> 20} MiB"}))
        return 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    answer = {"ok": True, "network_isolated": isolated, **found._asdict()}
    print(json.dumps({**answer, "peak_rss_mb": round(peak, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
