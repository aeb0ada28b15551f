"""Bounds on every model run at score time, whatever got past vetting and the sandbox.

A model file is code from whoever can write the models container, and a graph can size an
allocation or a loop from its input's *values* (docs/platform.md, "ONNX Runtime and model
files"): a file harmless on the sandbox's rows may ask for gigabytes, or seconds, on one event.
So each run is held to two bounds that do not depend on what the file says:

    time     a per-run deadline (ORT_RUN_DEADLINE_MS): one watchdog thread sets the run's
             `RunOptions.terminate` once it is past; ONNX Runtime checks the flag between nodes
             and the run fails with "Exiting due to terminate flag". It works for a run inline
             on the event loop too: a run releases the GIL, so the watchdog runs meanwhile.
    memory   one CPU arena shared by every session (`session.use_env_allocators`), capped at
             ORT_ARENA_MAX_MB (`OrtArenaCfg.max_mem`): an allocation past it fails before any
             byte is taken, so the process's memory never grows past the cap.

NOTE: the hot path pays a `RunOptions()` (~0.3 µs), a clock read, a dict write and a pop per run,
never a lock, an event, a syscall or a thread wake: the watchdog polls its table every `tick_s`
(half the deadline, at most 25 ms), and reads a thread's CPU clock only for a run it watches.

A run stopped by either bound raises `RunOverBudget` (shared/errors.py); the registry
quarantines its version (shared/models/registry.py).

A run that has its thread alone (one intra-op thread: `patient`) is held to its deadline in CPU,
read from that thread's clock: past the deadline on the wall, it is stopped as soon as it has used
its deadline's CPU (less the one tick before the watchdog first saw it), the model's fault. One
that has not is waiting for a CPU (CPU throttling at a replica's limit, a saturated core: the
machine's state, not the model's): it is left to finish, looked at again each tick, and stopped
only past `STARVED_GRACE` deadlines of wall time, as `CpuStarved` (a 503 to retry; its version is
not blamed). A run on several threads is stopped at its wall deadline, and called starved when its
calling thread ran under a quarter of the time it was watched.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import onnxruntime as ort

__all__ = ["OVER_ARENA", "TERMINATED", "RunWatchdog", "install_arena"]

STARVED_GRACE = 20  # deadlines of wall time a starved patient run may take (1 s at the default 50 ms)
TERMINATED = "terminate flag"  # in ONNX Runtime's message for a run it stopped
OVER_ARENA = "BFCArena"  # in its message for an allocation the arena's cap refused
_arena: list[int] = []  # the cap this process registered (create_and_register_allocator once per process)
_arena_guard = threading.Lock()


def install_arena(max_bytes: int) -> int:
    """Register the process's one capped CPU arena (once; later calls keep the first cap, which they return)."""
    with _arena_guard:
        if not _arena:
            memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            # kSameAsRequested (1): the arena grows by what a run asks, never doubles past the need
            config = ort.OrtArenaCfg({"max_mem": max_bytes, "arena_extend_strategy": 1})
            ort.create_and_register_allocator(memory, config)
            _arena.append(max_bytes)
        return _arena[0]


class RunWatchdog:
    """Stops runs past their deadline: `options = arm()`, `session.run(..., options)`, then `disarm(options)`.

    It also tells a slow run from a starved one (`starved`): from when it first sees a run, it reads
    the CPU clock of the thread that armed it; a run stopped after using less than a quarter of the
    time it was watched was waiting for a CPU (CPU throttling stops a thread outright), not running the model.
    """

    def __init__(self, deadline_s: float, *, tick_s: float | None = None, starved_grace: float = STARVED_GRACE) -> None:
        if deadline_s <= 0:
            raise ValueError("RunWatchdog.deadline_s must be > 0")
        self.deadline_s = deadline_s
        self.tick_s = tick_s if tick_s is not None else min(0.025, deadline_s / 2)
        self.starved_grace = starved_grace
        # id(options) -> [deadline, options, thread ident, first seen (monotonic), thread CPU then, starved,
        #                 the latest a starved run may go on (0: not patient), its deadline's span]
        self._runs: dict[int, list[Any]] = {}
        self._thread: threading.Thread | None = None
        self._start_guard = threading.Lock()
        self.stopped = 0  # runs this watchdog stopped

    def arm(self, deadline_s: float | None = None, *, patient: bool = False) -> ort.RunOptions:
        """RunOptions whose run is stopped `deadline_s` (default: the watchdog's) from now; `disarm` after.

        `patient`: the run has this thread alone (one intra-op thread), so its thread's CPU clock is the
        run's, and a starved run may go on up to `starved_grace` deadlines."""
        if self._thread is None:
            self._start()
        options = ort.RunOptions()
        span = deadline_s or self.deadline_s
        now = time.monotonic()
        cap = now + span * self.starved_grace if patient else 0.0
        self._runs[id(options)] = [now + span, options, threading.get_ident(), None, 0.0, False, cap, span]
        return options

    def disarm(self, options: ort.RunOptions) -> None:
        """The run of `options` ended (however it ended)."""
        self._runs.pop(id(options), None)

    def starved(self, options: ort.RunOptions) -> bool:
        """Whether the watchdog stopped this (armed) run after it ran less than a quarter of the time it was watched."""
        entry = self._runs.get(id(options))
        return entry is not None and bool(entry[5])

    def _start(self) -> None:
        with self._start_guard:
            if self._thread is None:
                thread = threading.Thread(target=self._watch, name="ort-run-watchdog", daemon=True)
                thread.start()
                self._thread = thread

    def _watch(self) -> None:
        while True:
            time.sleep(self.tick_s)
            now = time.monotonic()
            for entry in list(self._runs.values()):  # NOTE: a copy made under the GIL at once
                deadline, options, ident, seen, cpu_then, _, cap, span = entry
                if seen is None:
                    entry[3], entry[4] = now, _thread_cpu(ident)
                elif now >= deadline and not options.terminate:
                    ran = _thread_cpu(ident) - cpu_then
                    if cap:  # patient: its thread's CPU is the run's
                        cpu = span - min(self.tick_s, span / 2)  # NOTE: less what it used before the first look
                        if ran < cpu and now < cap:
                            continue  # waiting for a CPU, not running the model: looked at again next tick
                        entry[5] = ran < cpu
                    else:  # NOTE: a busy host gives a thread less than all; throttled, ~none
                        entry[5] = ran < (now - seen) / 4
                    options.terminate = True
                    self.stopped += 1


def _thread_cpu(ident: int) -> float:
    """The CPU time of thread `ident` so far (0.0 where the platform cannot say)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (AttributeError, OSError):
        return 0.0
