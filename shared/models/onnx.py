"""The ONNX Runtime adapter: providers, session options, load, warm-up and predict.

onnxruntime errors never leave this module untranslated: a file that cannot be
loaded or does not fit its metadata is `ModelInvalid`; a failing run is
`InferenceFailed`, one stopped by its deadline or the memory cap is `RunOverBudget`, and one
that waited for a CPU past its grace is `CpuStarved` (shared/models/bounds.py). In warm-up a failed
run refuses the file (`ModelInvalid`), a starved one is run again and then `WarmupStarved`.
Every file passes the static checks (`shared.models.vetting`) before onnxruntime is handed its bytes.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from shared.domain.spec import ModelSpec
from shared.errors import CpuStarved, InferenceFailed, ModelInvalid, RunOverBudget, ScoringError, WarmupStarved
from shared.models.bounds import OVER_ARENA, TERMINATED, RunWatchdog, install_arena
from shared.models.vetting import DEFAULT_POLICY, VettingPolicy, vet
from shared.policies import OrtOptions

__all__ = ["OnnxModel", "choose_providers", "gpu_missing", "gpu_usable"]

log = logging.getLogger(__name__)

WARM_TRIES = 3  # runs of a warm-up step starved of CPU, in all, before the load is given up (not the file: retried)
INTER_OP_THREADS = 1  # fixed by design: sessions run ORT_SEQUENTIAL, one node at a time, so no inter-op pool works
_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@functools.cache
def gpu_usable() -> bool:
    """True only when a CUDA driver loads and reports at least one device.

    NOTE: onnxruntime-gpu lists CUDAExecutionProvider as available on any machine;
    asking for it without a GPU logs errors, so we ask the driver first.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return False
        return count.value > 0
    except OSError:
        return False


def gpu_missing(options: OrtOptions, sessions: Mapping[str, Sequence[str]] | None = None) -> str | None:
    """Why CUDA does not run although ORT_REQUIRE_GPU asks for it; None when it does (or is not asked for).

    `sessions`: each loaded model's session providers. NOTE: onnxruntime-gpu lists the CUDA
    provider on any image, and a session whose CUDA provider cannot load its libraries (an image
    built without ORT_GPU=1) silently runs on the CPU: only the session's own providers tell.
    """
    if not options.require_gpu:
        return None
    if not options.use_gpu:
        return "ORT_REQUIRE_GPU is set, but ORT_USE_GPU is false"
    on_cpu = sorted(name for name, providers in (sessions or {}).items() if "CUDAExecutionProvider" not in providers)
    why = _no_cuda()
    if on_cpu:
        cause = why or "CUDA did not load (an image built without ORT_GPU=1 lacks its libraries)"
        return f"ORT_REQUIRE_GPU is set, but {', '.join(on_cpu)} runs on the CPU: {cause}"
    return None if why is None else f"ORT_REQUIRE_GPU is set, but {why}"


def _no_cuda() -> str | None:
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "this onnxruntime has no CUDA provider (the CPU package)"
    if not gpu_usable():
        return "no CUDA device is usable (no GPU attached, or its driver did not load)"
    return None


def choose_providers(options: OrtOptions) -> list[str]:
    """CUDA (and TensorRT when enabled) only when a GPU is really usable, else CPU."""
    available = set(ort.get_available_providers())
    providers: list[str] = []
    if options.use_gpu and "CUDAExecutionProvider" in available and gpu_usable():
        if options.use_tensorrt and "TensorrtExecutionProvider" in available:
            providers.append("TensorrtExecutionProvider")
        providers.append("CUDAExecutionProvider")
    providers.append("CPUExecutionProvider")
    return providers


def _session_options(options: OrtOptions) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.intra_op_threads
    so.inter_op_num_threads = INTER_OP_THREADS
    so.graph_optimization_level = _OPT_LEVELS[options.graph_optimization]
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3  # errors only: a CPU-only host must not log GPU noise
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    install_arena(options.arena_max_mb << 20)
    so.add_session_config_entry("session.use_env_allocators", "1")  # NOTE: the process's one capped arena
    return so


_watchdogs: dict[float, RunWatchdog] = {}  # one watchdog thread per deadline (one per process in practice)


def watchdog(options: OrtOptions) -> RunWatchdog:
    """The process's watchdog for ORT_RUN_DEADLINE_MS."""
    found = _watchdogs.get(options.run_deadline_ms)
    if found is None:
        found = _watchdogs.setdefault(options.run_deadline_ms, RunWatchdog(options.run_deadline_ms / 1000))
    return found


class OnnxModel:
    """One InferenceSession for one model version, checked against its metadata."""

    def __init__(
        self, session: ort.InferenceSession, spec: ModelSpec, watchdog: RunWatchdog | None = None, threads: int = 1
    ) -> None:
        self._session: ort.InferenceSession | None = session
        self.spec = spec
        self.providers: list[str] = session.get_providers()
        self._outputs = [spec.score_output]
        self._watchdog = watchdog
        self._one_thread = threads == 1  # the run is on the calling thread: its CPU clock is the run's

    @classmethod
    def load(
        cls, data: bytes, options: OrtOptions, policy: VettingPolicy = DEFAULT_POLICY, *, cpu_only: bool = False
    ) -> OnnxModel:
        """Vet the ONNX bytes (`ModelInvalid` with the reason), then create the session and parse its metadata.

        `cpu_only`: the sandbox's trial (its memory cap covers host memory, not a GPU's).
        """
        vet(data, policy)  # NOTE: before onnxruntime parses a byte: it follows external data, runs any op
        providers = ["CPUExecutionProvider"] if cpu_only else choose_providers(options)
        try:
            session = ort.InferenceSession(data, _session_options(options), providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
            raise ModelInvalid(f"onnxruntime cannot load the model: {_first_line(exc)}") from exc
        meta = session.get_modelmeta()
        spec = ModelSpec.from_metadata(
            meta.custom_metadata_map,
            [i.name for i in session.get_inputs()],
            [o.name for o in session.get_outputs()],
        )
        _check_input(session, spec)
        return cls(session, spec, watchdog(options), options.intra_op_threads)

    def predict(self, matrix: npt.NDArray[np.float32], deadline_s: float | None = None) -> npt.NDArray[np.float64]:
        """Scores in [0, 1], one per row of `matrix`; `RunOverBudget` past the deadline (`deadline_s`, else
        ORT_RUN_DEADLINE_MS) or the memory cap."""
        session = self._session
        if session is None:
            raise InferenceFailed("model session was released")
        watchdog = self._watchdog
        options = None if watchdog is None else watchdog.arm(deadline_s, patient=self._one_thread)
        try:
            (output,) = session.run(self._outputs, {self.spec.input_name: matrix}, options)
        except Exception as exc:
            raise self._run_error(exc, options) from exc
        finally:
            if watchdog is not None:
                watchdog.disarm(options)
        scores = np.asarray(output, dtype=np.float64)
        if scores.ndim == 2:
            if not 0 <= self.spec.score_column < scores.shape[1]:
                raise InferenceFailed(
                    f"score column {self.spec.score_column} is outside the {scores.shape[1]} output columns"
                )
            scores = scores[:, self.spec.score_column]
        return scores.reshape(-1)

    def _run_error(self, exc: Exception, options: ort.RunOptions | None) -> ScoringError:
        """A failed run, translated: `RunOverBudget` when a bound stopped it, else `InferenceFailed`."""
        message = str(exc)
        if OVER_ARENA in message or isinstance(exc, MemoryError):
            limit = "memory"
            return RunOverBudget(
                f"a run asked for more than the memory cap (ORT_ARENA_MAX_MB){_asked(message)}", limit=limit
            )
        watchdog = self._watchdog
        if TERMINATED in message and watchdog is not None and options is not None:
            deadline_ms = watchdog.deadline_s * 1000
            if self._one_thread and watchdog.starved(options):
                # NOTE: it did not use its deadline's CPU in STARVED_GRACE deadlines of wall time: starved
                # of CPU (throttled, a saturated core), not the model's fault: the caller retries, nothing is blamed
                grace_ms = deadline_ms * watchdog.starved_grace
                return CpuStarved(f"a run was starved of CPU for {grace_ms:g} ms (its deadline {deadline_ms:g} ms)")
            return RunOverBudget(f"a run was stopped past its {deadline_ms:g} ms deadline (ORT_RUN_DEADLINE_MS)")
        return InferenceFailed(f"onnxruntime run failed: {_first_line(exc)}")

    def warm(self, max_batch: int) -> None:
        """Run a lone row and a full batch of defaults, then the golden rows; `ModelInvalid` if the answers
        are not scores (or a run fails or trips a bound), `WarmupStarved` if a run stays starved of CPU."""
        defaults = np.array([f.default for f in self.spec.features], dtype=np.float32)
        for n in sorted({1, max_batch}):
            scores = self._warm_run(np.tile(defaults, (n, 1)), "warm-up")
            if scores.shape != (n,):
                raise ModelInvalid(f"model returned {scores.shape[0]} scores for {n} rows")
            if not np.all(np.isfinite(scores)) or not np.all((scores >= 0.0) & (scores <= 1.0)):
                raise ModelInvalid("warm-up scores are not finite values within [0, 1]")
        self._check_golden()

    def _warm_run(self, matrix: npt.NDArray[np.float32], what: str) -> npt.NDArray[np.float64]:
        """One run of the warm-up or the golden check. A model that cannot score its own rows is not servable
        (`ModelInvalid`); a run starved of CPU (`CpuStarved`: throttled, not the model's fault) is run again,
        WARM_TRIES in all, and then given up as `WarmupStarved`: retryable, the file not blamed."""
        for tried in range(1, WARM_TRIES + 1):
            try:
                return self.predict(matrix)
            except (InferenceFailed, RunOverBudget) as exc:
                raise ModelInvalid(f"{what} failed: {exc.detail}") from exc
            except CpuStarved as exc:
                if tried == WARM_TRIES:
                    raise WarmupStarved(
                        f"{what} starved of CPU {WARM_TRIES} times in a row, the last: {exc.detail}; "
                        "not the file's fault: its next load tries again"
                    ) from exc
                log.warning("%s run starved of CPU (try %d of %d): run again: %s", what, tried, WARM_TRIES, exc.detail)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_golden(self) -> None:
        golden = self.spec.golden
        if golden is None:
            return
        scores = self._warm_run(np.array(golden.rows, dtype=np.float32), "golden rows")
        worst = float(np.max(np.abs(scores - np.array(golden.scores))))
        if not worst <= golden.tolerance:  # a NaN fails too
            raise ModelInvalid(f"golden scores differ by {worst:.6g} (tolerance {golden.tolerance:g})")

    @property
    def released(self) -> bool:
        return self._session is None

    def release(self) -> None:
        """Drop the session so ONNX Runtime frees its memory."""
        self._session = None


def _check_input(session: ort.InferenceSession, spec: ModelSpec) -> None:
    (node,) = [i for i in session.get_inputs() if i.name == spec.input_name]
    shape: list[Any] = list(node.shape)
    if node.type != "tensor(float)":
        raise ModelInvalid(f"input {node.name!r} is {node.type}, expected tensor(float)")
    if len(shape) != 2 or (isinstance(shape[1], int) and shape[1] != spec.width):
        raise ModelInvalid(f"input {node.name!r} has shape {shape}, metadata declares {spec.width} features")
    if isinstance(shape[0], int):
        raise ModelInvalid(f"input {node.name!r} has a fixed batch axis {shape[0]}; it must be dynamic")


_ASKED = re.compile(r"running (\w+) node.*smaller than requested bytes of (\d+)", re.S)


def _asked(message: str) -> str:
    """`: ConstantOfShape asked for 3072 MiB`, from ONNX Runtime's message where it says so."""
    found = _ASKED.search(message)
    return "" if found is None else f": {found[1]} asked for {int(found[2]) >> 20} MiB"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
