"""Overload: an open-loop load at multiples of capacity, with admission control on and off.

    python -m bench.overload [--seconds 8] [--factors 0.3,1,2,3] [--out bench-out]

The app serves `POST /api/score` on the model path (CACHE_L1_SIZE=0: every request runs the
model through the batcher) with `make run`'s server. Capacity is what 16 closed-loop
connections get (h2load). Then h2load offers each multiple of it open-loop: 512 connections,
each sending at a fixed rate, their start staggered (2 ms apart in fours) so the schedule is
smooth rather than 512 requests at once. h2load logs every request (send time, status,
latency): the shed rate is the share of 503s, the admitted p99 the 99th percentile of the
200s. "on" runs the defaults (MAX_INFLIGHT, MAX_LOOP_LAG_MS), then a tighter lag bound (5 ms);
"off" sets both to 0.

NOTE: h2load sends a request on schedule only once the connection's previous one answered:
where the server stalls past a connection's interval (512 / rate), later sends slip and the
latency is under-reported (coordinated omission). With shedding on, answers come back well
inside the interval; with it off, read the "off" rows as a lower bound.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.servers import start_server

CONNECTIONS = 512
BODY = {
    "event_id": "ol-1",
    "user_id": "u00001",
    "amount": 12.5,
    "currency": "USD",
    "merchant_id": "m-1",
    "merchant_category": "5411",
    "country": "US",
    "channel": "app",
    "timestamp": "2026-11-29T10:20:00Z",
}


def h2load(url: str, body: Path, *, seconds: float, rate: float | None, log: Path | None) -> str:
    """Closed loop (16 connections, `seconds`) when `rate` is None; else open loop at `rate` req/s."""
    common = ["h2load", "--h1", "-d", str(body), "-H", "content-type: application/json"]
    if rate is None:
        command = [*common, "-c", "16", "-D", str(round(seconds)), url]
    else:
        per_client = max(1, round(rate / CONNECTIONS))
        total = int(per_client * CONNECTIONS * seconds)
        stagger = ["-r", "4", "--rate-period", "2ms"]  # NOTE: -r and -D exclude each other: -n bounds it
        command = [*common, "-c", str(CONNECTIONS), *stagger, "--rps", str(per_client), "-n", str(total), url]
        if log is not None:
            command[1:1] = ["--log-file", str(log)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"h2load failed ({done.returncode}): {done.stdout[-500:]}{done.stderr[-500:]}")
    return done.stdout


def throughput(report: str) -> float:
    line = next(line for line in report.splitlines() if line.startswith("finished in"))
    return float(line.split(",")[1].split()[0])


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def summarise(log: Path) -> dict[str, object]:
    rows = [line.split("\t") for line in log.read_text().splitlines() if line]
    # NOTE: h2load runs until its -n requests are done: the span of the log is the run's length
    seconds = (max(int(r[0]) + int(r[2]) for r in rows) - min(int(r[0]) for r in rows)) / 1e6 if rows else 1.0
    ok = [int(r[2]) / 1000 for r in rows if r[1] == "200"]
    shed = [int(r[2]) / 1000 for r in rows if r[1] == "503"]
    other = len(rows) - len(ok) - len(shed)
    return {
        "requests": len(rows),
        "offered_per_s": round(len(rows) / seconds),
        "admitted_per_s": round(len(ok) / seconds),
        "shed_share": round(len(shed) / len(rows), 4) if rows else 0.0,
        "other": other,
        "admitted_p50_ms": percentile(ok, 0.5),
        "admitted_p99_ms": percentile(ok, 0.99),
        "shed_p50_ms": percentile(shed, 0.5),
        "shed_p99_ms": percentile(shed, 0.99),
    }


def run(seconds: float, factors: list[float]) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="overload-"))
    body = tmp / "event.json"
    body.write_text(json.dumps(BODY))
    runs: list[dict[str, object]] = []
    results: dict[str, object] = {"connections": CONNECTIONS, "seconds": seconds, "runs": runs}
    modes: tuple[tuple[str, dict[str, str]], ...] = (
        ("on", {}),  # the defaults
        ("on, MAX_LOOP_LAG_MS=5", {"MAX_LOOP_LAG_MS": "5"}),
        ("off", {"MAX_INFLIGHT": "0", "MAX_LOOP_LAG_MS": "0"}),
    )
    for mode, env in modes:
        server = start_server(
            f"overload-{len(runs)}", "shared.asgi:app", {"CACHE_L1_SIZE": "0", **env}, server="uvicorn"
        )
        url = f"http://127.0.0.1:{server.port}/api/score"
        try:
            h2load(url, body, seconds=2, rate=None, log=None)  # NOTE: warm-up
            capacity = throughput(h2load(url, body, seconds=seconds, rate=None, log=None))
            for factor in factors:
                log = tmp / f"{mode}-{factor}.log"
                h2load(url, body, seconds=seconds, rate=factor * capacity, log=log)
                row = {"admission": mode, "capacity_per_s": round(capacity), "factor": factor}
                runs.append(row | summarise(log))
                print(json.dumps(runs[-1]), flush=True)
        finally:
            server.stop()
    return results


def table(results: dict[str, object]) -> str:
    lines = [
        "| admission | offered (x capacity) | capacity req/s | sent req/s | admitted req/s | shed "
        "| admitted p50 ms | admitted p99 ms | 503 p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:  # type: ignore[attr-defined]
        lines.append(
            f"| {r['admission']} | {r['factor']} | {r['capacity_per_s']} | {r['offered_per_s']} | {r['admitted_per_s']} | "
            f"{r['shed_share']:.1%} | {r['admitted_p50_ms']} | {r['admitted_p99_ms']} | {r['shed_p99_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--factors", default="0.3,1,2,3")
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is missing: apt-get install nghttp2-client")
    results = run(args.seconds, [float(f) for f in args.factors.split(",")])
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "overload.json").write_text(json.dumps(results, indent=2))
    (out / "overload.md").write_text(table(results) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
