"""The production hop in instructions: what the app adds under the worker, against the same call in process.

    python -m bench.worker_instructions [--in-flight 1,8]

bench.worker measures CPU seconds, which this shared 2-core machine moves by tens of percent from
run to run. This counts instructions instead (valgrind's cachegrind: the same count whatever else
the machine does), for the question issue 56 asks of `score` under the worker: does the app do
more work there than the same call in process?

For each `--in-flight` value, four counts, each the difference of two runs of N = 500 and N = 2,500
invocations over 2,000 (start-up, warm-up and shutdown cancel):

- floor: the empty functions (bench/worker_floor/) under the real worker runtime (tests/worker/proxy.py
  on .venv-worker's Python 3.13), the whole process (its loop and its gRPC threads);
- app: `function_app.py`, the same way, every event a cache miss (bench.worker's `singles`: every
  answer counted, a phase under 99.9 % scored refused);
- in process: the same `create_app` on the same interpreter, settings from the same environment
  (GC tuning included), sent the same events through its ASGI interface, `--in-flight` at a time
  (1: the lone path; 8: the micro-batcher shares runs);
- the app's own work under the worker, app - floor, and its ratio to the in-process count.

CPU seconds per instruction differ between the two (the worker's threads share the core and its
caches with the app's code, and hand the GIL to each other: docs/capacity.md); this says which of
the two a gap in CPU comes from. ~1 min per count; writes bench-out/worker_instructions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.instructions import CACHEGRIND, instructions
from bench.worker import FLOOR, singles
from tests.worker import rpc
from tests.worker.host import REPO, running_worker

COUNTS = (500, 2_500)


def worker_count(app_dir: Path, count: int, in_flight: int, models: Path) -> int:
    """Instructions of one worker process: start, `count` score invocations after a warm-up, stop."""
    app = app_dir == REPO
    with tempfile.TemporaryDirectory(prefix="worker-instructions-") as out:
        under = [*CACHEGRIND[:-1], "-q", f"--cachegrind-out-file={out}/cg.out"]
        env = {"MODELS_DIR": str(models), "FUNCTIONS_WORKER_RUNTIME": "python", "GRPC_PORT": "0",
               "AzureWebJobsScriptRoot": str(app_dir), "PYTHONHASHSEED": "0"}  # fmt: skip
        with running_worker(env, memory_publisher=False, timeout=600, under=under) as (host, worker):
            init = host.start(app_dir, timeout=600)
            if init.result.status != 1:
                raise RuntimeError(init.result.exception.message)
            deadline = time.monotonic() + 600
            while host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{app_dir.name}: not ready under valgrind within 600 s")
                time.sleep(0.2)
            singles(host, worker.pid, count, f"i{count}", app, in_flight=in_flight)
        return _summary(Path(out) / "cg.out")


def _summary(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"cachegrind wrote no summary in {path}")


def in_process_count(count: int, in_flight: int, models: Path) -> int:
    """Instructions of one in-process run on the worker's interpreter (this module's `--child`)."""
    command = [*CACHEGRIND, str(rpc.worker_python()), "-m", "bench.worker_instructions", "--child", str(count),
               "--in-flight", str(in_flight)]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO), "MODELS_DIR": str(models),
           "GRPC_PORT": "0", "REDIS_URL": ""}  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    return instructions(done.stderr)


async def child(count: int, in_flight: int) -> None:
    """`count` misses through the app's ASGI interface, `in_flight` at a time (under valgrind)."""
    from bench.inprocess import call
    from bench.loadgen import event_body, now_stamp
    from shared.adapters.http.app import create_app
    from shared.core.holder import ServiceHolder

    holder = ServiceHolder()  # NOTE: Settings.from_env, as the Functions handlers build it
    app = create_app(holder)
    await holder.get()
    for n in range(200):
        await call(app, event_body(5_000_000 + n, timestamp=now_stamp()))
    bodies = [event_body(1_000_000 + n, timestamp=now_stamp()) for n in range(count)]
    for first in range(0, count, in_flight):
        await asyncio.gather(*(call(app, body) for body in bodies[first : first + in_flight]))
    os._exit(0)  # NOTE: no teardown counted


def per_invocation(count: Callable[[int], int]) -> float:
    """Instructions an invocation: the difference of two runs over their difference in N."""
    low, high = (count(n) for n in COUNTS)
    return (high - low) / (COUNTS[1] - COUNTS[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", default="1,8", help="comma-separated invocations in flight (default 1,8)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(child(args.child, int(args.in_flight)))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    models = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(REPO / "models", models)
    os.environ.pop("REDIS_URL", None)  # NOTE: in-process features on every side, as bench.worker
    report: dict[str, dict[str, float]] = {}
    for in_flight in (int(n) for n in args.in_flight.split(",")):
        floor = per_invocation(partial(worker_count, FLOOR, in_flight=in_flight, models=models))
        app = per_invocation(partial(worker_count, REPO, in_flight=in_flight, models=models))
        here = per_invocation(partial(in_process_count, in_flight=in_flight, models=models))
        own = app - floor
        report[str(in_flight)] = {"floor": floor, "app": app, "app_minus_floor": own, "in_process": here,
                                  "ratio": own / here}  # fmt: skip
        print(f"{in_flight} in flight: floor {floor:,.0f}, app {app:,.0f} instructions an invocation; the app's own "
              f"{own:,.0f} against {here:,.0f} in process: {own / here:.2f}x", flush=True)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "worker_instructions.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
