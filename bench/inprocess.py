"""CPU per request of the ASGI app called in-process: no server, no load generator, no network.

    .venv/bin/python -m bench.inprocess [--profile hit|miss|batch] [--telemetry] [--rollouts [--rounds 7] [--profile miss]]

The same app object `make run` serves, driven through its ASGI interface in groups of 8
concurrent requests; `time.process_time` per request, median of 5 rounds, beside the bare
Starlette endpoint. This isolates the Python cost of the score path from the machine's noise
(embedded defaults: no Redis). `--profile` prints the cProfile of one path. `--telemetry`
compares the app with TELEMETRY=false and true, rounds interleaved, in one run. `--rollouts`
compares the miss path with nothing on, with the prediction log (a directory, every decision),
and with the log and a shadow version, on wrk's events (bench/wrk/score.lua: ~10% review and
decline, whose records the writer explains); the background jobs run on the same loop, so their
CPU is in the figures (`--profile miss` then profiles the log and shadow one).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import time
from typing import Any

import orjson

from bench.ceiling import starlette_app
from bench.loadgen import event_body, now_stamp
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings


async def asgi_call(app: Any, method: str, path: str, body: bytes = b"") -> list[dict[str, Any]]:
    """One HTTP request through `app`'s ASGI interface, in this process (a JSON `body`, if any):
    the messages the app sent back."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())] if body else []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def call(app: Any, body: bytes, path: str = "/api/score") -> None:
    sent = await asgi_call(app, "POST", path, body)
    if sent[0]["status"] != 200:
        raise RuntimeError(orjson.loads(sent[-1]["body"]))


async def cpu_per_request(app: Any, bodies: list[bytes], path: str = "/api/score") -> float:
    started = time.process_time()
    for i in range(0, len(bodies), 8):
        await asyncio.gather(*(call(app, b, path) for b in bodies[i : i + 8]))
    return (time.process_time() - started) / len(bodies) * 1e6


async def telemetry_overhead() -> None:
    """hit and miss CPU per request, TELEMETRY off vs on (1% traced), interleaved rounds, medians."""
    apps = {}
    for name, on in (("off", False), ("on", True)):
        holder = ServiceHolder(lambda on=on: Settings(gc_gen0_threshold=0, telemetry=on))  # type: ignore[misc]
        apps[name] = (holder, create_app(holder))
        await holder.get()
    hits = [event_body(n) for n in range(200)] * 20
    for _, app in apps.values():
        for body in hits[:200]:
            await call(app, body)
    rounds: dict[tuple[str, str], list[float]] = {}
    for r in range(7):
        for name in ("off", "on") if r % 2 == 0 else ("on", "off"):
            app = apps[name][1]
            rounds.setdefault(("hit", name), []).append(await cpu_per_request(app, hits))
            misses = [event_body(10_000_000 * (r + 1) + (0 if name == "off" else 5_000_000) + n) for n in range(4000)]
            rounds.setdefault(("miss", name), []).append(await cpu_per_request(app, misses))
    for path in ("hit", "miss"):
        cpu_off, cpu_on = (statistics.median(rounds[(path, n)]) for n in ("off", "on"))
        print(
            f"{path}: {cpu_off:.1f} µs off, {cpu_on:.1f} µs on, +{cpu_on - cpu_off:.1f} µs "
            f"({cpu_on / cpu_off:.3f}x), median of 7 rounds"
        )
    for holder, _ in apps.values():
        await holder.aclose()


def batch_body(first: int, size: int = 64) -> bytes:
    """One `/api/score/batch` body of `size` events of unique rows, as `make bench` sends."""
    return b'{"events":[' + b",".join(event_body(first + i) for i in range(size)) + b"]}"


def wrk_event(n: int, users: int = 2000) -> bytes:
    """Event `n` as bench/wrk/score.lua writes it: its amounts, countries and channels give the
    review and decline share wrk's runs have (~10%: the records the log's writer explains)."""
    cents = n % 500_000
    return orjson.dumps(
        {
            "event_id": f"e-{n}",
            "user_id": f"u{n % users:05d}",
            "amount": 1 + cents // 100 + (cents % 100) / 100,
            "currency": "USD",
            "merchant_id": f"m-{n % 97}",
            "merchant_category": "5411",
            "country": ("US", "GB", "DE", "NG")[n % 4],
            "channel": ("web", "app", "pos")[n % 3],
            "timestamp": now_stamp(),
        }
    )


async def rollouts_overhead(profile: bool, rounds: int) -> None:
    """miss CPU per request: nothing on, the prediction log, the log and a shadow; interleaved rounds."""
    import dataclasses
    import shutil
    import tempfile
    from pathlib import Path

    from bench.rollouts import models_dir
    from shared.settings import PredictionLogPolicy

    work = Path(tempfile.mkdtemp(prefix="inprocess-rollouts-"))
    base = Settings(gc_gen0_threshold=0, models_dir=str(models_dir(work / "models")), model_poll_s=0)
    logged = dataclasses.replace(base, prediction_log=PredictionLogPolicy(sink="dir", directory=str(work / "log")))
    apps = {}
    for name, settings in (("off", base), ("log", logged), ("log+shadow", logged)):
        holder = ServiceHolder(lambda settings=settings: settings)  # type: ignore[misc]
        apps[name] = (holder, create_app(holder))
        core = await holder.get()
        if name == "log+shadow":
            await core.admin.set_shadow("fraud", "1")
    per_round = 4000
    values: dict[str, list[float]] = {}
    for r in range(rounds):
        names = list(apps) if r % 2 == 0 else list(reversed(apps))
        for name in names:
            # NOTE: wrk's numbering (16 a step): amounts unique within an app for 31,250 events, so every one a miss
            misses = [wrk_event(16 * (r * per_round + n)) for n in range(per_round)]
            started = time.process_time()
            await cpu_per_request(apps[name][1], misses)
            await asyncio.sleep(1.2)  # NOTE: past the writer's flush interval: each round pays for its own records
            values.setdefault(name, []).append((time.process_time() - started) / per_round * 1e6)
    off = statistics.median(values["off"])
    for name, found in values.items():
        cpu = statistics.median(found)
        ratios = [v / o for v, o in zip(found, values["off"], strict=True)]
        print(
            f"miss, {name}: {cpu:.1f} µs CPU per request, +{cpu - off:.1f} µs ({cpu / off:.3f}x; per round "
            f"{statistics.median(ratios):.3f}x median), median of {rounds}"
        )
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        await cpu_per_request(apps["log+shadow"][1], [wrk_event(16 * (40_000 + n)) for n in range(4000)])
        await asyncio.sleep(1.2)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    for holder, _ in apps.values():
        await holder.aclose()
    shutil.rmtree(work, ignore_errors=True)


async def main(profile: str | None) -> None:
    holder = ServiceHolder(lambda: Settings(gc_gen0_threshold=0))
    app = create_app(holder)
    await holder.get()
    hits = [event_body(n) for n in range(200)] * 20
    for body in hits[:200]:
        await call(app, body)
    paths = {
        "ceiling": (starlette_app, lambda r: hits, "/api/score"),
        "hit": (app, lambda r: hits, "/api/score"),
        "miss": (app, lambda r: [event_body(1_000_000 * (r + 1) + n) for n in range(4000)], "/api/score"),
        "batch": (app, lambda r: [batch_body(1_000_000 * (r + 1) + 64 * n) for n in range(60)], "/api/score/batch"),
    }
    for name, (target, bodies, path) in paths.items():
        rounds = [await cpu_per_request(target, bodies(r), path) for r in range(5)]
        per = f" (64 events; per event: {statistics.median(rounds) / 64:.1f} µs)" if name == "batch" else ""
        print(f"{name}: {statistics.median(rounds):.1f} µs CPU per request (median of 5 rounds){per}")
    if profile:
        target, bodies, path = paths[profile]
        prof = cProfile.Profile()
        prof.enable()
        await cpu_per_request(target, bodies(9), path)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    await holder.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=["hit", "miss", "batch"])
    parser.add_argument("--telemetry", action="store_true", help="TELEMETRY off vs on, in one run")
    parser.add_argument("--rollouts", action="store_true", help="the prediction log and a shadow off vs on")
    parser.add_argument("--rounds", type=int, default=7, help="--rollouts: interleaved rounds (default 7)")
    options = parser.parse_args()
    if options.rollouts:
        asyncio.run(rollouts_overhead(options.profile == "miss", options.rounds))
    else:
        asyncio.run(telemetry_overhead() if options.telemetry else main(options.profile))
