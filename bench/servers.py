"""Processes the benchmark starts: Redis (when none answers), the app, the bare endpoints."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

APP = "shared.adapters.http.asgi:app"
# `make run`'s app held to this machine's CPU, without Redis, logging warnings alone: the score path's A/B base
CPU_APP_ENV = {"ORT_USE_GPU": "false", "REDIS_URL": "", "LOG_LEVEL": "WARNING"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout_s: float = 30.0) -> float:
    """Seconds until `url` answers 200."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310 our own loopback http:// URL
                if r.status == 200:
                    return time.perf_counter() - start
        except OSError:
            pass
        time.sleep(0.01)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s} s")


def _over_tree(pid: int, read: Callable[[int], int]) -> int:
    """The sum of `read(p)` over a process and its descendants (Linux /proc); one gone meanwhile counts 0."""
    total = 0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            total += read(p)
            for task in Path(f"/proc/{p}/task").iterdir():  # NOTE: every thread: uvicorn spawns workers from one
                pids.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, IndexError, ValueError, StopIteration):
            continue
    return total


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children, in MiB (Linux /proc)."""
    return _over_tree(pid, _rss_kib) / 1024


def _ticks(stat: Path) -> int:
    """utime + stime of a process's or a thread's `stat` file (fields 14 and 15 of proc(5))."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its children (Linux /proc)."""
    return _over_tree(pid, lambda p: _ticks(Path(f"/proc/{p}/stat"))) / os.sysconf("SC_CLK_TCK")


def cpu_parts_s(pid: int) -> tuple[float, float]:
    """CPU seconds so far of (the main thread, the process's other threads): for a uvicorn app
    the main thread is the event loop's; the others are worker threads (model runs, file writes)."""
    main = others = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ticks = _ticks(task / "stat")
        except (OSError, IndexError, ValueError):
            continue  # NOTE: a thread that ended meanwhile
        if task.name == str(pid):
            main += ticks
        else:
            others += ticks
    hz = os.sysconf("SC_CLK_TCK")
    return main / hz, others / hz


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    start_to_ready_s: float

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def server_command(target: str, port: int, workers: int = 1) -> list[str]:
    """`workers` uvicorn processes (uvloop + httptools, as `make run`) serving the ASGI `target` on 127.0.0.1:`port`."""
    flags = ["--loop", "uvloop", "--http", "httptools", "--workers", str(workers), "--no-access-log"]
    flags += ["--log-level", "warning", "--lifespan", "on", "--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", "uvicorn", *flags, target]


def start_server(
    name: str,
    target: str,
    env: dict[str, str],
    *,
    workers: int = 1,
    ready_path: str = "/api/health/ready",
    cwd: Path | None = None,
) -> Server:
    """uvicorn with `workers` processes on a free loopback port; timed from spawn to a 200 on `ready_path`.

    `cwd`: the checkout whose code it serves (`python -m` imports from there first; bench/versus.py)."""
    port = free_port()
    started = time.perf_counter()
    command = server_command(target, port, workers)
    with open(Path(tempfile.gettempdir()) / f"bench-{name}.log", "wb") as log:  # the child keeps its own handle
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    wait_http(f"http://127.0.0.1:{port}{ready_path}")
    return Server(name, port, process, time.perf_counter() - started)


def start_app(name: str, env: Mapping[str, str], *, cwd: Path | None = None) -> Server:
    """The HTTP app (APP) on CPU_APP_ENV with `env` over it: the server the score path's A/B benchmarks compare."""
    return start_server(name, APP, {**CPU_APP_ENV, **env}, cwd=cwd)


class Redis:
    """REDIS_URL when it answers, else our own redis-server on a free port."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.url = os.environ.get("REDIS_URL", "")
        if not self.url or not self._answers():
            port = free_port()
            self.process = subprocess.Popen(
                [
                    "redis-server",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--maxmemory",
                    "512mb",
                    "--maxmemory-policy",
                    "allkeys-lru",
                ],
                stdout=subprocess.DEVNULL,
            )
            self.url = f"redis://127.0.0.1:{port}/0"
            for _ in range(100):
                if self._answers():
                    break
                time.sleep(0.05)

    def _answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
