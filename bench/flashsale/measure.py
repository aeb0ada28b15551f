"""Measure the simulation's inputs on this machine and write them to bench/flashsale/measured.json.

    python -m bench.flashsale.measure [--seconds 4] [--rates 100,...] [--worker-json FILE]

Two measurements, each the project's own bench with a short duration:
1. `python -m bench.worker --rounds 1` (the app through the real worker runtime, `make worker-venvs`):
   worker CPU per `score` invocation, per event of a 64-event `score_batch`, and ms per 64-message
   `payments` batch (skipped, and said so, without .venv-worker; `--worker-json` reuses a run's file);
2. the open-loop load generator (bench/loadgen.py) against one, then two processes of `make run`'s
   server with Redis (REDIS_URL, or a redis-server of our own): at each offered rate, the answered
   requests' latency percentiles, the share refused (503), the server-side time of each answer
   (`timings_ms.total`: the shape of a request's time inside the app) and the server's CPU per request
   (one process's; with two, the CPU figure is the parent's alone and not used).
   The lowest rate gives the service-time shape; the others are the points the simulation is
   checked against (tests/bench/test_flashsale_validation.py).

The machine's load average is recorded beside the figures: on a shared machine they move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.flashsale.inputs import MEASURED
from bench.loadgen import event_body, open_loop
from bench.servers import Redis, cpu_s, start_server
from bench.verdicts import SHED, Verdicts

REPO = Path(__file__).resolve().parents[2]
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999)
# Admission made tighter for the overload series (the same settings the app reads: docs/settings.md)
TIGHT_ADMISSION = {"MAX_INFLIGHT": "2", "MAX_QUEUED": "4", "MAX_QUEUE_WAIT_MS": "5", "QUEUE_TARGET_MS": "2"}


def worker_figures(path: Path | None, event_age_s: float = 0.0, rounds: int = 1) -> dict[str, Any] | None:
    """bench.worker's medians for the app (`rounds` rounds; the gRPC doors too), or None where the 3.13
    runtime is not built."""
    if path is None:
        if not (REPO / ".venv-worker" / ".installed").exists():
            print("no .venv-worker (make worker-venvs): the worker figures are not measured", flush=True)
            return None
        out = Path(tempfile.mkdtemp())
        cmd = [sys.executable, "-m", "bench.worker", "--rounds", str(rounds), "--singles", "1500", "--batches", "10",
               "--event-age-s", str(event_age_s), "--doors"]  # fmt: skip
        subprocess.run([*cmd, "--out", str(out)], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        path = out / "worker.json"
    figures: dict[str, Any] = json.loads(path.read_text())
    return dict(figures.get("app", figures))  # NOTE: the app's side; files from before the floor have only it


def open_loop_point(
    port: int, pid: int, rate: float, seconds: float, offset: int, *, body: Callable[[int], bytes] = event_body
) -> dict[str, Any]:
    """One offered rate: client latencies, refusals, server-side time and CPU per request; refused
    (`WorkNotDone`) when answers other than decisions and admission's refusals came back."""
    before, generator_before, started = cpu_s(pid), time.process_time(), time.perf_counter()
    res = asyncio.run(open_loop(port, rate, seconds, connections=32, offset=offset, body=body))
    used, generator = cpu_s(pid) - before, time.process_time() - generator_before
    wall = time.perf_counter() - started
    answered = np.array(res.latencies_ms)
    server = np.array(res.stages["total"])
    verdicts = Verdicts(f"open loop at {rate:.0f}/s")
    verdicts.counts.update(res.verdicts)
    verdicts.add("unanswered", res.sent - verdicts.total)
    verdicts.require("completed", *SHED)  # NOTE: a refusal by admission is a measured outcome; a 4xx is not
    late = np.array(res.late_ms)
    return {
        "offered": rate,
        "sent": res.sent,
        "answered": len(answered),
        "refused": sum(res.verdicts[k] for k in SHED),
        "verdicts": verdicts.as_dict(),
        # NOTE: the generator's own lateness: past a few ms it measured the machine, not the app
        "generator_late_p99_ms": float(np.quantile(late, 0.99)) if len(late) else None,
        "p50_ms": float(np.quantile(answered, 0.5)) if len(answered) else None,
        "p99_ms": float(np.quantile(answered, 0.99)) if len(answered) else None,
        "server_ms": {str(q): float(np.quantile(server, q)) for q in QUANTILES} if len(server) else {},
        "cpu_us_per_request": used / max(res.sent, 1) * 1e6,  # every process of the server
        "generator_cpu_us_per_request": generator / max(res.sent, 1) * 1e6,
        # NOTE: the cores the server and the generator kept busy together: near the machine's, the
        # point measured the machine, not the app (tests/bench/test_flashsale_validation.py skips it)
        "machine_cores_busy": (used + generator) / wall,
    }


def open_loop_points(env: dict[str, str], workers: int, args: argparse.Namespace, rates: str) -> list[dict[str, Any]]:
    """Every offered rate against `workers` processes of the app (CPU per request: the first process only)."""
    server = start_server("flashsale", "shared.adapters.http.asgi:app", env, workers=workers)
    pinned = pin(server.process.pid) if workers == 1 else False
    try:
        asyncio.run(open_loop(server.port, 200, 1.0, offset=90_000_000 + workers))  # warm
        points = []
        for i, rate in enumerate(float(r) for r in rates.split(",")):
            print(f"open loop, {workers} process(es): {rate:.0f} req/s for {args.seconds:.0f} s", flush=True)
            offset = (i + 91 + 10 * workers) * 1_000_000
            points.append({**open_loop_point(server.port, server.process.pid, rate, args.seconds, offset),
                           "pinned": pinned})  # fmt: skip
        return points
    finally:
        server.stop()
        if pinned:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))


def pin(server_pid: int) -> bool:
    """One process's server on the last core, this generator on the others: the server then has
    a core of its own, as a replica's event loop does, and the overload side measures the app."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return False
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), [cores[-1]])
    os.sched_setaffinity(0, cores[:-1])
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each open-loop rate")
    parser.add_argument(
        "--rates", default="100,400,800,1600,2400,3600", help="offered rates (req/s); the first sets the shape"
    )
    parser.add_argument("--overload-rates", default="3000,5000,7000", help="rates against the tight admission")
    parser.add_argument("--worker-json", type=Path, help="a bench.worker output to reuse instead of a new run")
    parser.add_argument("--out", type=Path, default=MEASURED)
    parser.add_argument("--event-age-s", type=float, default=0.0, help="date bench.worker's events this far back")
    parser.add_argument(
        "--worker-only",
        type=int,
        metavar="ROUNDS",
        help="re-measure only the worker's figures (bench.worker, ROUNDS rounds) and keep the open-loop points",
    )
    args = parser.parse_args()
    if args.worker_only:
        kept: dict[str, Any] = json.loads(args.out.read_text())
        kept["worker"] = worker_figures(args.worker_json, args.event_age_s, args.worker_only)
        kept["worker_measured"] = {
            "command": f"python -m bench.flashsale.measure --worker-only {args.worker_only}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_avg_1m": os.getloadavg()[0],
        }
        args.out.write_text(json.dumps(kept, indent=2) + "\n")
        print(json.dumps(kept["worker"], indent=2))
        return
    measured: dict[str, Any] = {
        "command": f"python -m bench.flashsale.measure --rates {args.rates} --seconds {args.seconds:g}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_before": os.getloadavg()[0],
        },
        "worker": worker_figures(args.worker_json, args.event_age_s),
    }
    redis = Redis()
    prefix = f"flashsale:{uuid.uuid4().hex[:8]}:"
    from bench.run import seed  # NOTE: heavy (Feast helpers); only this command needs it

    seed(redis.url, prefix)
    env = {"REDIS_URL": redis.url, "REDIS_KEY_PREFIX": prefix, "PYTHONPATH": str(REPO), "LOG_LEVEL": "WARNING"}
    try:
        for workers, key in ((1, "open_loop_one_process"), (2, "open_loop_two_processes")):
            measured[key] = {"server": "uvicorn", "points": open_loop_points(env, workers, args, args.rates)}
        # NOTE: the overload side: this machine's generator cannot offer what saturates one process with
        # the defaults' queue, so admission is made tighter and the same process is pushed past it
        tight = {**env, **TIGHT_ADMISSION}
        measured["open_loop_tight_admission"] = {
            "server": "uvicorn",
            "admission": TIGHT_ADMISSION,
            "points": open_loop_points(tight, 1, args, args.overload_rates),
        }
    finally:
        redis.stop()
    measured["machine"]["load_avg_1m_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps(measured, indent=2))


if __name__ == "__main__":
    main()
