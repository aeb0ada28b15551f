"""`make bench`: one run that measures the score path beside its ceiling and its floor.

    .venv/bin/python -m bench.run --out bench-out [--seconds 5] [--rounds 3]

Steps (progress is printed as it goes):
  1. Redis (REDIS_URL, or our own redis-server), demo user features seeded under a fresh prefix, and
     again in Feast's layout under a fresh Feast project (bench/feast.py: as `feast materialize`
     writes them, no Feast process), with the demo model plus `serving.feast` in --out/feast-models;
  2. closed loop, wrk -t2 -c16, rounds interleaved so every figure sees the same machine, every
     server uvicorn (uvloop + httptools, as `make run`): a raw ASGI echo, the ceiling each round's
     figures are divided by · bare Starlette (same stack) · /api/score on the miss path (unique
     rows; PREDICTION_L2 auto, and always = a Redis read per batch) · the miss path reading Feast's
     layout (FEATURE_STORE=feast) · the hit path · the miss path with WORKERS=2 ·
     /api/score/batch with 8 and 64 events · the alternative a user would hand-write
     (bench/peer_fastapi.py: FastAPI + ONNX Runtime on uvicorn, same model, same Redis); the
     server's CPU seconds per request beside every figure;
  3. open loop at fixed offered rates on the miss path: latency percentiles and per-stage timings;
  4. in-process: raw ONNX Runtime on the model (the floor) and the batcher's added latency;
  5. report.md, results.json and PNG plots in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from bench import feast, floor, report
from bench.loadgen import now_stamp, open_loop
from bench.servers import Redis, cpu_s, rss_mib, start_server

ROOT = Path(__file__).resolve().parent.parent
WRK_SCRIPT = ROOT / "bench" / "wrk" / "score.lua"
MODEL = ROOT / "models" / "fraud" / "1" / "model.onnx"  # what the app serves (MODELS_DIR=models, fraud, v1)


def say(step: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {step}", flush=True)


def wrk(port: int, seconds: float, connections: int, mode: str, path: str = "/api/score") -> dict[str, float]:
    env = {**os.environ, "MODE": mode}
    if mode == "batch64":
        env |= {"MODE": "batch", "BATCH": "64"}
    cmd = [
        "wrk",
        "-t2",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "5s",
        "-s",
        str(WRK_SCRIPT),
        f"http://127.0.0.1:{port}{path}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(r"WRK_JSON (\{.*\})", out)
    if match is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    raw = json.loads(match.group(1))
    seconds_run = raw["duration_us"] / 1e6
    return {
        "requests": raw["requests"],
        "rps": raw["requests"] / seconds_run,
        "p50_ms": raw["p50_us"] / 1000,
        "p90_ms": raw["p90_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "max_ms": raw["max_us"] / 1000,
        "errors": raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["non2xx"] + raw["timeouts"],
    }


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def seed(redis_url: str, prefix: str) -> int:
    from shared.features.store import load_feature_file, seed_redis

    return asyncio.run(seed_redis(redis_url, load_feature_file(ROOT / "data" / "demo_users.json"), prefix=prefix))


def seed_feast_layout(redis_url: str, project: str, models_dir: Path) -> dict[str, str]:
    """The demo users in Feast's layout, the demo model reading them: the app's env for that layout."""
    asyncio.run(feast.seed_demo_layout(redis_url, project, event_time_s=time.time() - 60))
    feast.write_demo_model(models_dir)
    return {"FEATURE_STORE": "feast", "FEAST_PROJECT": project, "MODELS_DIR": str(models_dir)}


def probe(port: int) -> dict[str, object]:
    """One scored answer for a fixed event: the layouts must give the same score, none on defaults."""
    body = json.dumps({"event_id": "probe", "user_id": "u00042", "amount": 912.4, "currency": "USD",
                       "merchant_id": "m-77", "merchant_category": "7995", "country": "NG", "channel": "web",
                       "timestamp": now_stamp()}).encode()  # fmt: skip
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/score", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 our own loopback http:// URL
        found: dict[str, object] = json.loads(answer.read())
    return found


def feature_errors(port: int) -> float:
    """Feature reads that failed (each a timeout or error: that batch on model defaults), from /api/stats."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=5) as answer:
        return float(json.loads(answer.read())["features"].get("errors", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rates", default="250,500,1000,2000,3000", help="open-loop offered rates (req/s)")
    parser.add_argument("--open-seconds", type=float, default=4.0)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    args.out.mkdir(parents=True, exist_ok=True)

    say("starting Redis and seeding the demo user features")
    redis = Redis()
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    project = f"bench{uuid.uuid4().hex[:8]}"
    users = seed(redis.url, prefix)
    # NOTE: a prefix of its own: its fraud/1 is another file, which the fleet's records of the
    # native demo model (its SHA-256) would refuse
    feast_env = seed_feast_layout(redis.url, project, args.out / "feast-models") | {
        "REDIS_KEY_PREFIX": f"{prefix}feast:"
    }
    app_env = {"REDIS_URL": redis.url, "REDIS_KEY_PREFIX": prefix, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING"}
    app_env["ANSWER_DEFAULTED"] = "true"  # NOTE: the layout probes read `defaulted` (report.feature_layouts)
    results: dict[str, object] = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "config": {
            "seconds": args.seconds,
            "rounds": args.rounds,
            "connections": args.connections,
            "users_seeded": users,
        },
    }
    try:
        say("starting the servers: app (uvicorn + Starlette + core), bare Starlette, raw ASGI")
        starts = []
        for _ in range(3):
            server = start_server("app-start", "shared.adapters.http.asgi:app", app_env)
            starts.append(server.start_to_ready_s)
            server.stop()
        results["start_to_ready_s"] = statistics.median(starts)

        always = {"PREDICTION_L2": "always"}
        app, bare = "shared.adapters.http.asgi:app", "bench.ceiling"
        # name: (target, wrk mode, extra env, workers)
        targets: dict[str, tuple[str, str, dict[str, str], int]] = {
            report.CEILING: (f"{bare}:raw_app", "hit", {}, 1),
            "ceiling_starlette": (f"{bare}:starlette_app", "hit", {}, 1),
            "score_miss": (app, "miss", {}, 1),
            "score_miss_redis": (app, "miss", always, 1),
            report.FEAST: (app, "miss", feast_env, 1),
            "score_hit": (app, "hit", {}, 1),
            "score_miss_2_workers": (app, "miss", {}, 2),
            "batch_8": (app, "batch", {}, 1),
            "batch_64": (app, "batch64", {}, 1),
        }
        if importlib.util.find_spec("fastapi") is not None:  # NOTE: pinned in requirements-dev.txt
            # no prediction cache: its "hit" is this same run (bench/report.py, vs_peer)
            targets["peer_fastapi"] = ("bench.peer_fastapi:app", "miss", {"PEER_MODEL_PATH": str(MODEL)}, 1)
        else:
            say("fastapi is not installed (make bench installs requirements-dev.txt): no FastAPI peer")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        probes: dict[str, dict[str, object]] = {}
        memory: dict[str, float] = {}
        for round_no in range(1, args.rounds + 1):
            for name, (target, mode, extra, workers) in targets.items():
                say(
                    f"round {round_no}/{args.rounds}: wrk {name} ({args.seconds:.0f} s, {args.connections} connections)"
                )
                server = start_server(name, target, {**app_env, **extra}, workers=workers)
                try:
                    if name in report.LAYOUTS.values() and name not in probes:
                        probes[name] = probe(server.port)
                    if mode == "hit":
                        wrk(server.port, 1, args.connections, mode)  # warm the cache with the hit set
                    cpu_before = cpu_s(server.process.pid)
                    run = wrk(server.port, args.seconds, args.connections, mode)
                    run["cpu_us_per_req"] = (cpu_s(server.process.pid) - cpu_before) / max(run["requests"], 1) * 1e6
                    if name == report.FEAST:
                        run["feature_errors"] = feature_errors(server.port)
                    runs[name].append(run)
                    memory[name] = rss_mib(server.process.pid)
                finally:
                    server.stop()
        wrk_results = {name: median_of(r) for name, r in runs.items()}
        wrk_results["batch_8"]["events_per_s"] = wrk_results["batch_8"]["rps"] * 8
        wrk_results["batch_64"]["events_per_s"] = wrk_results["batch_64"]["rps"] * 64
        results["wrk"] = wrk_results
        results["wrk_rounds"] = runs
        results["memory_mib"] = memory
        if "peer_fastapi" in runs:
            results["vs_fastapi"] = report.vs_peer(results)
        results["feature_layouts"] = report.feature_layouts(results, probes)

        say("open loop on the miss path at fixed offered rates")
        server = start_server("open-loop", "shared.adapters.http.asgi:app", app_env)
        open_results = []
        try:
            asyncio.run(open_loop(server.port, 200, 1.0, offset=10_000_000))  # warm
            for i, rate in enumerate(float(r) for r in args.rates.split(",")):
                say(f"  offered {rate:.0f} req/s for {args.open_seconds:.0f} s")
                res = asyncio.run(
                    open_loop(
                        server.port, rate, args.open_seconds, connections=args.connections, offset=(i + 2) * 10_000_000
                    )
                )
                open_results.append(report.summarize_open_loop(res))
        finally:
            server.stop()
        results["open_loop"] = open_results

        say("in-process floor: raw ONNX Runtime, and the batcher's added latency")
        results["floor"] = floor.raw_onnxruntime(MODEL)
        results["batcher"] = floor.batcher_overhead(ROOT / "models")
    finally:
        asyncio.run(feast.clean(redis.url, prefix, project))
        redis.stop()

    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    report.write(results, args.out)
    say(f"wrote {args.out / 'report.md'} and plots")
    print((args.out / "report.md").read_text())


if __name__ == "__main__":
    main()
