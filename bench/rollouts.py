"""The prediction log and a shadow version under load: what they cost, and that no record is lost.

    python -m bench.rollouts [--rounds 3] [--seconds 10] [--loss-seconds 60] [--outage-seconds 20]
    python -m bench.rollouts --variants [--rounds 3] [--seconds 5]   # which part costs what

1. Cost: two app servers side by side, one with nothing (PREDICTION_LOG=off, no shadow), one
   with the log at PREDICTION_LOG_SAMPLE=1 and a shadow version set; `/api/score` miss at 16
   connections in interleaved rounds; medians of req/s, p50/p99 and the per-round ratio. The
   "on" server writes to a local directory (PREDICTION_LOG=dir): on this 2-core machine an
   Azurite beside the app would take the app's CPU, which a remote storage account does not.
2. Loss, sink healthy: the blob sink (Azurite) at capacity for `--loss-seconds`: decisions the
   app scored vs records it counted written vs lines found in the blobs.
3. Loss, sink down: the same with Azurite cut off (a TCP proxy resetting every connection) for
   `--outage-seconds` mid-run: failed requests, and the drop count vs what is missing.

`--variants` instead runs six servers side by side: nothing on, the log, the log without drift,
the log with reason codes (PREDICTION_LOG_REASONS=true), a shadow alone, the log and a shadow;
each one's req/s ratio to "nothing on", p99 and CPU per request, in all and by part: the event
loop's thread and the worker threads (bench.servers.cpu_parts_s). Every run, cost's too,
reports the same parts.

Both versions are the demo model's file (live `2`, shadow `1`): the shadow does the same work
a real candidate does. Needs wrk, and Azurite at AZURITE_BLOB_ENDPOINT for 2 and 3 (run it
under scripts/with_services.sh). Writes bench-out/rollouts.json and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.run import MODEL, ROOT, say, seed, wrk
from bench.servers import Redis, Server, cpu_parts_s, start_server

APP = "shared.adapters.http.asgi:app"


def call(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, method=method)
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 our own loopback http:// URL
        found: dict[str, Any] = json.loads(answer.read())
    return found


def models_dir(root: Path) -> Path:
    """fraud/1 and fraud/2, both the demo model's file: 2 serves, 1 shadows it."""
    for version in ("1", "2"):
        (root / "fraud" / version).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MODEL, root / "fraud" / version / "model.onnx")
    return root


def settle(port: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """/api/stats once the log holds nothing and the shadow queue is empty (or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    stats = call(port, "GET", "/api/stats")
    while time.monotonic() < deadline:
        stats = call(port, "GET", "/api/stats")
        if stats.get("prediction_log", {}).get("buffered", 0) == 0:
            time.sleep(1.5)  # NOTE: one more flush interval: a batch the writer took is in flight
            stats = call(port, "GET", "/api/stats")
            if stats["prediction_log"]["buffered"] == 0:
                return stats
        time.sleep(0.5)
    return stats


def lines_in_blobs(connection: str, container: str) -> int:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection).get_container_client(container)
    total = 0
    for blob in client.list_blobs():
        total += client.download_blob(blob.name).readall().count(b"\n")
    return total


def measured(server: Server, args: argparse.Namespace) -> dict[str, float]:
    """One wrk run of `/api/score` misses, with the server's CPU a request: in all, and by part
    (the event loop's thread, the other threads)."""
    before = cpu_parts_s(server.process.pid)
    run = wrk(server.port, args.seconds, args.connections, "miss")
    used = [
        (b - a) / max(run["requests"], 1) * 1e6 for a, b in zip(before, cpu_parts_s(server.process.pid), strict=True)
    ]
    run["cpu_us_per_req"] = sum(used)
    run["loop_cpu_us_per_req"], run["threads_cpu_us_per_req"] = used
    return run


def cost(args: argparse.Namespace, env: dict[str, str], out: Path) -> dict[str, Any]:
    off = start_server("rollouts-off", APP, {**env, "PREDICTION_LOG": "off"})
    on_env = {**env, "PREDICTION_LOG": "dir", "PREDICTION_LOG_DIR": str(out / "predictions")}
    on = start_server("rollouts-on", APP, on_env)
    try:
        call(on.port, "PUT", "/api/models/fraud/shadow", {"version": "1"})
        runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for round_no in range(1, args.rounds + 1):
            for name, server in (("off", off), ("on", on)):
                say(f"cost round {round_no}/{args.rounds}: {name}")
                runs[name].append(measured(server, args))
        stats = settle(on.port)
        rollout = call(on.port, "GET", "/api/models/fraud/rollout")
    finally:
        off.stop()
        on.stop()
    ratios = [b["rps"] / a["rps"] for a, b in zip(runs["off"], runs["on"], strict=True)]
    return {
        "off": _medians(runs["off"]),
        "on": _medians(runs["on"]),
        "rps_ratio_per_round": [round(r, 3) for r in ratios],
        "rps_ratio_median": round(statistics.median(ratios), 3),
        "on_stats": stats.get("prediction_log"),
        "shadow": rollout.get("shadow"),
    }


def variants(args: argparse.Namespace, env: dict[str, str], work: Path) -> dict[str, Any]:
    """Which part costs what: each server beside the one with nothing on, in interleaved rounds."""
    log = {"PREDICTION_LOG": "dir"}
    kinds = {
        "off": ({"PREDICTION_LOG": "off"}, False),
        "log": (log, False),
        "log_no_drift": ({**log, "DRIFT_REFERENCE": "0"}, False),
        "log_with_reasons": ({**log, "PREDICTION_LOG_REASONS": "true"}, False),
        "shadow": ({"PREDICTION_LOG": "off"}, True),
        "log_and_shadow": (log, True),
    }
    servers: dict[str, Server] = {}
    try:
        for name, (extra, shadowed) in kinds.items():
            extra = {**extra, "PREDICTION_LOG_DIR": str(work / f"predictions-{name}")}
            servers[name] = start_server(f"rollouts-{name}", APP, {**env, **extra})
            if shadowed:
                call(servers[name].port, "PUT", "/api/models/fraud/shadow", {"version": "1"})
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in kinds}
        for round_no in range(1, args.rounds + 1):
            for name, server in servers.items():
                say(f"variants round {round_no}/{args.rounds}: {name}")
                runs[name].append(measured(server, args))
    finally:
        for server in servers.values():
            server.stop()
    return {
        name: {
            **_medians(found),
            "rps_ratio_median": round(
                statistics.median(r["rps"] / o["rps"] for r, o in zip(found, runs["off"], strict=True)), 3
            ),
        }
        for name, found in runs.items()
    }


def loss(args: argparse.Namespace, env: dict[str, str], endpoint: str, *, outage_s: float, name: str) -> dict[str, Any]:
    """A run at capacity against the blob sink through a proxy that can cut it off."""
    from tests.conftest import AZURITE_ACCOUNT, AZURITE_KEY
    from tests.faults.proxy import Proxy  # NOTE: the fault proxy of the tests: resets every connection

    host, _, port = endpoint.removeprefix("http://").partition(":")
    container = f"bench-{uuid.uuid4().hex[:8]}"
    with Proxy((host, int(port.split("/")[0]))) as proxy:
        proxied = f"http://127.0.0.1:{proxy.port}/{AZURITE_ACCOUNT}"
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={proxied};"
        )
        direct = connection.replace(proxied, endpoint.rstrip("/"))
        blob_env = {
            **env,
            "PREDICTION_LOG": "blob",
            "PREDICTION_LOG_CONTAINER": container,
            "ModelStorage": connection,
            "MODELS_CONTAINER": f"{container}-models",
        }
        _upload_models(direct, f"{container}-models")
        server: Server = start_server(name, APP, blob_env)
        try:
            call(server.port, "PUT", "/api/models/fraud/shadow", {"version": "1"})
            before = call(server.port, "GET", "/api/stats")["events"]["scored"]
            if outage_s:
                threading.Timer(args.loss_seconds / 3, proxy.mode, ("reset",)).start()
                threading.Timer(args.loss_seconds / 3 + outage_s, proxy.mode, ("pass",)).start()
            say(
                f"{name}: wrk {args.loss_seconds:.0f} s at capacity"
                + (f", sink cut for {outage_s:.0f} s" if outage_s else "")
            )
            run = wrk(server.port, args.loss_seconds, args.connections, "miss")
            proxy.mode("pass")
            stats = settle(server.port, 120)
        finally:
            server.stop()  # NOTE: a clean stop: the log sends what it still holds, within its bound
        found = lines_in_blobs(direct, container)
    log = stats["prediction_log"]
    scored = stats["events"]["scored"] - before
    dropped = log["dropped_full"] + log["dropped_sink"] + log["dropped_shutdown"]
    return {
        "seconds": args.loss_seconds,
        "outage_s": outage_s,
        "answered_200": run["requests"] - run["errors"],
        "failed_requests": run["errors"],
        "rps": round(run["rps"], 1),
        "p99_ms": round(run["p99_ms"], 2),
        "scored": scored,
        "recorded": log["recorded"],
        "written": log["written"],
        "dropped": dropped,
        "found_in_sink": found,
        "missing": log["recorded"] - found,
        "lost_unaccounted": log["recorded"] - found - dropped,
    }


def _upload_models(connection: str, container: str) -> None:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection).get_container_client(container)
    client.create_container()
    data = MODEL.read_bytes()
    for version in ("1", "2"):
        client.upload_blob(f"fraud/{version}/model.onnx", data, overwrite=True)


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--loss-seconds", type=float, default=60.0)
    parser.add_argument("--outage-seconds", type=float, default=20.0)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--skip-loss", action="store_true")
    parser.add_argument("--variants", action="store_true", help="which part costs what (no cost or loss runs)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    args.out.mkdir(parents=True, exist_ok=True)
    redis = Redis()
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    seed(redis.url, prefix)
    work = Path(tempfile.mkdtemp(prefix="bench-rollouts-"))
    env = {
        "REDIS_URL": redis.url,
        "REDIS_KEY_PREFIX": prefix,
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "WARNING",
        "MODELS_DIR": str(models_dir(work / "models")),
        "MODEL_POLL_SECONDS": "0",
    }
    results: dict[str, Any] = {"config": vars(args) | {"out": str(args.out)}, "cores": os.cpu_count()}
    try:
        if args.variants:
            results["variants"] = variants(args, env, work)
            for name, found in results["variants"].items():
                print(f"{name:22s} {found['rps']:7.0f} req/s  ratio {found['rps_ratio_median']:.3f}  "
                      f"p99 {found['p99_ms']:5.2f} ms  {found['cpu_us_per_req']:5.1f} µs CPU/req (loop "
                      f"{found['loop_cpu_us_per_req']:5.1f}, threads {found['threads_cpu_us_per_req']:4.1f})",
                      flush=True)  # fmt: skip
            args.skip_cost = args.skip_loss = True
        if not args.skip_cost:
            results["cost"] = cost(args, env, work)
            print(json.dumps(results["cost"], indent=2), flush=True)
        endpoint = os.environ.get("AZURITE_BLOB_ENDPOINT", "")
        if not args.skip_loss and endpoint:
            results["healthy"] = loss(args, env, endpoint, outage_s=0.0, name="rollouts-healthy")
            print(json.dumps(results["healthy"], indent=2), flush=True)
            results["outage"] = loss(args, env, endpoint, outage_s=args.outage_seconds, name="rollouts-outage")
            print(json.dumps(results["outage"], indent=2), flush=True)
        elif not args.skip_loss:
            say("AZURITE_BLOB_ENDPOINT is not set (run under scripts/with_services.sh): no loss runs")
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    (args.out / "rollouts.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
