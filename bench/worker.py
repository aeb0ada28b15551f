"""The production hop, measured: the app driven through the real worker runtime.

    python -m bench.worker [--rounds 3] [--singles 3000] [--batches 20] [--profile]

A stand-in host (tests/worker/host.py) drives `function_app.py` through `azure_functions_runtime`
(Python 3.13, .venv-worker; `make worker-venvs`) over the host's gRPC messages, as in
production. It reports, medians over `--rounds` fresh worker processes:

- `score`: single-event invocations per second (8 in flight, every event a cache miss) and the
  worker process's CPU per invocation (/proc: user + system, over the measured invocations);
- `score_batch`: HTTP invocations of 64 events each (2 in flight), events/s and worker CPU per event;
- `payments`: batches of 64 messages, one at a time (the host runs one batch at a time per
  replica), events per second, worker CPU per event and milliseconds per batch.

The stand-in host shares the machine's cores with the worker: invocations/s is a floor, CPU
per invocation is the figure that carries over. `--profile` records the worker with py-spy
during the single-event run (bench-out/worker-profile.txt, collapsed stacks).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.loadgen import event_body
from tests.worker.host import REPO, Host, running_worker

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def drive(count: int, in_flight: int, send: Callable[[int], Any]) -> float:
    """`count` invocations, `in_flight` at a time; the wall seconds they took."""
    slots = threading.Semaphore(in_flight)
    futures = []
    started = time.perf_counter()
    for n in range(count):
        slots.acquire()
        future = send(n)
        future.add_done_callback(lambda _: slots.release())
        futures.append(future)
    for future in futures:
        response = future.result(60)
        if response.result.status != 1:  # StatusResult.Success
            raise RuntimeError(f"an invocation failed: {response.result.exception.message}")
    return time.perf_counter() - started


def singles(host: Host, pid: int, count: int, tag: str) -> dict[str, float]:
    def send(n: int) -> Any:
        body = event_body(n).replace(b'"event_id":"', f'"event_id":"{tag}-'.encode(), 1)
        return host.invoke_async("score", host.http("score", "POST", "/api/score", body))

    drive(200, 8, send)  # warm
    before = cpu_s(pid)
    seconds = drive(count, 8, send)
    used = cpu_s(pid) - before
    return {"invocations_per_s": count / seconds, "cpu_us_per_invocation": used / count * 1e6}


def http_batches(host: Host, pid: int, count: int, tag: str, size: int = 64) -> dict[str, float]:
    """`score_batch` invocations of `size` events each, 2 in flight."""

    def send(n: int) -> Any:
        events = [
            event_body(500_000 + n * size + i).replace(b'"event_id":"', f'"event_id":"{tag}-h{n}-'.encode(), 1)
            for i in range(size)
        ]
        body = b'{"events":[' + b",".join(events) + b"]}"
        return host.invoke_async("score_batch", host.http("score_batch", "POST", "/api/score/batch", body))

    drive(5, 2, send)
    before = cpu_s(pid)
    seconds = drive(count, 2, send)
    used = cpu_s(pid) - before
    return {"events_per_s": count * size / seconds, "cpu_us_per_event": used / (count * size) * 1e6}


def batches(host: Host, pid: int, count: int, tag: str, size: int = 64) -> dict[str, float]:
    def send(n: int) -> Any:
        messages = []
        for i in range(size):
            body = event_body(250_000 + n * size + i).replace(b'"event_id":"', f'"event_id":"{tag}-b{n}-'.encode(), 1)
            messages.append((f"{tag}-{n}-{i}", body))
        inputs, metadata = host.batch(messages)
        return host.invoke_async("payments", inputs, metadata)

    drive(3, 1, send)
    before = cpu_s(pid)
    seconds = drive(count, 1, send)
    used = cpu_s(pid) - before
    return {
        "events_per_s": count * size / seconds,
        "cpu_us_per_event": used / (count * size) * 1e6,
        "ms_per_batch": seconds / count * 1000,
    }


def profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    if shutil.which("py-spy") is None and not (REPO / ".venv" / "bin" / "py-spy").exists():
        return None
    spy = shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy")
    return subprocess.Popen(
        [
            spy,
            "record",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "200",
            "-f",
            "raw",
            "-o",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def one_round(args: argparse.Namespace, round_no: int, env: dict[str, str], out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with running_worker(env, memory_publisher=True) as (host, worker):
        init = host.start(REPO)
        if init.result.status != 1:
            raise RuntimeError(init.result.exception.message)
        for _ in range(600):  # NOTE: the warm-up loads the models right after indexing
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        spy = profile(worker.pid, 8, out / "worker-profile.txt") if args.profile and round_no == 1 else None
        result["score"] = singles(host, worker.pid, args.singles, f"r{round_no}")
        if spy is not None:
            spy.wait()
        result["score_batch_64"] = http_batches(host, worker.pid, args.batches * 10, f"r{round_no}")
        result["payments_64"] = batches(host, worker.pid, args.batches, f"r{round_no}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--singles", type=int, default=3000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench-out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = Path(tempfile.mkdtemp()) / "models"
    shutil.copytree(REPO / "models", models)
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # NOTE: in-process features on every side
    env = {"MODELS_DIR": str(models), "AzureWebJobsScriptRoot": str(REPO), "FUNCTIONS_WORKER_RUNTIME": "python"}
    os.environ.clear()
    os.environ.update(base)
    rounds = []
    for n in range(1, args.rounds + 1):
        rounds.append(one_round(args, n, env, args.out))
        print(json.dumps({"round": n, **rounds[-1]}), flush=True)
    summary = {
        section: {k: statistics.median(r[section][k] for r in rounds) for k in rounds[0][section]}
        for section in rounds[0]
    }
    (args.out / "worker.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
