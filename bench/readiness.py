"""CPU per anonymous readiness probe against the number of sockets the process holds open.

    .venv/bin/python -m bench.readiness [--probes 500] [--rounds 5]

For 10 and then 3,000 open TCP sockets (loopback connections, both ends in this process: what a
caller opening gRPC connections leaves on a replica), `GET /api/health/ready` is sent `--probes`
times through the ASGI app in-process (the same app `make run` serves), and `time.process_time`
per probe is taken, median of `--rounds` rounds. Beside it, the platform doctor's per-descriptor
check alone (`PlatformDoctor(recheck_s=0).problem()`): what every probe paid when the doctor read
the descriptors on each one. The figures belong in docs/benchmark.md ("Readiness probes").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.inprocess import asgi_call
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.runtime.doctor import PlatformDoctor
from shared.settings import Settings

COUNTS = (10, 3000)  # sockets a replica holds: idle, and under a caller that opens connections


async def probe(app: Any) -> None:
    sent = await asgi_call(app, "GET", "/api/health/ready")
    if sent[0]["status"] != 200:
        raise RuntimeError(f"readiness answered {sent[0]['status']}: the probe measured is not the ready one")


def open_sockets(count: int) -> list[socket.socket]:
    """`count` TCP sockets: count // 2 loopback connections, both of their ends kept open."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    held = []
    for _ in range(count // 2):
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = listener.accept()
        held += [client, server]
    listener.close()
    return held


def cpu_us(step: Callable[[], object], probes: int) -> float:
    started = time.process_time()
    for _ in range(probes):
        step()
    return (time.process_time() - started) / probes * 1e6


async def main(probes: int, rounds: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    holder = ServiceHolder(lambda: Settings(gc_gen0_threshold=0))
    app = create_app(holder)
    await holder.get()
    per_probe_doctor = PlatformDoctor(stubs=[], recheck_s=0)
    print(f"load average {os.getloadavg()[0]:.2f}; {probes} probes a round, median of {rounds} rounds")
    for count in COUNTS:
        held = open_sockets(count if count > 100 else 0)  # NOTE: the few the process holds anyway stand for 10
        fds = len(os.listdir("/proc/self/fd"))
        now, before = [], []
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(probes):
                await probe(app)
            now.append((time.process_time() - started) / probes * 1e6)
            before.append(cpu_us(per_probe_doctor.problem, max(1, probes // 10)))
        print(
            f"{fds} descriptors open: readiness probe {statistics.median(now):.1f} µs CPU; the per-descriptor "
            f"check it no longer runs per probe {statistics.median(before):.1f} µs"
        )
        for sock in held:
            sock.close()
    await holder.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.probes, args.rounds))
