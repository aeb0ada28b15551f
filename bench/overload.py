"""Overload: open-loop arrivals at multiples of capacity, alone and beside a CPU-bound neighbour.

    python -m bench.overload [--seconds 8] [--factors 0.3,0.5,0.8,1,2,3] [--neighbour 0.5,0.8]
                             [--connections 64] [--overload-connections 512] [--off] [--out bench-out]

The app serves `POST /api/score` on the model path (CACHE_L1_SIZE=0: every request runs the
model through the batcher) with `make run`'s server and default admission settings. In the
same run: capacity is what 16 closed-loop connections get (h2load, what `make bench` runs,
and its refusals are counted: there must be none); "unloaded" is an open-loop step at 0.05x;
then each factor is offered open loop, `--connections` connections (`--overload-connections`
past 1x, so that the rate offered is really sent: see the note) each sending at a fixed
rate, their starts staggered so arrivals are evenly spaced rather than bunched; then the
`--neighbour` factors again with a CPU-bound process (`stress-ng --cpu 1`, or a Python
busy loop) on the same machine. `--off` adds the same steps with admission control off.

Per step: sent, refused share, admitted p50/p99 (200s), refusal p99 (503s), each from
h2load's per-request log.

NOTE: h2load sends a connection's next request on schedule only once its previous one is
answered: where answers take longer than a connection's interval (connections / rate),
sends slip and latency is under-reported (coordinated omission). The `sent` column shows
what was really offered; read a step whose `sent` falls short of its target as a lower bound.
At 2x and 3x, 64 connections become a closed loop of 64 (each waits its answer): hence more
connections there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.loadgen import now_stamp
from bench.servers import start_server

UNLOADED = 0.05
BODY = {
    "event_id": "ol-1",
    "user_id": "u00001",
    "amount": 12.5,
    "currency": "USD",
    "merchant_id": "m-1",
    "merchant_category": "5411",
    "country": "US",
    "channel": "app",
    "timestamp": now_stamp(),  # NOTE: h2load repeats one body: dated when the bench starts
}


def h2load(
    url: str, body: Path, *, seconds: float, rate: float | None, connections: int, log: Path | None = None
) -> str:
    """Closed loop (16 connections, `seconds`) when `rate` is None; else open loop at `rate` req/s."""
    common = ["h2load", "--h1", "-d", str(body), "-H", "content-type: application/json"]
    if rate is None:
        command = [*common, "-c", "16", "-D", str(round(seconds)), url]
    else:
        per_client = max(1.0, rate / connections)
        total = max(connections, int(per_client * connections * seconds))
        # NOTE: -r/--rate-period start connections in groups, so their schedules interleave; -r and -D
        # exclude each other, so -n bounds the step
        period_ms = max(1, round(1000 / per_client / connections * 4))
        stagger = ["-r", "4", "--rate-period", f"{period_ms}ms"]
        command = [*common, "-c", str(connections), *stagger, "--rps", f"{per_client:.2f}", "-n", str(total), url]
    if log is not None:
        command[1:1] = ["--log-file", str(log)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
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
    """Sent, refused and latency figures from h2load's log (start µs, status, duration µs per line)."""
    rows = [line.split("\t") for line in log.read_text().splitlines() if line]
    seconds = (max(int(r[0]) + int(r[2]) for r in rows) - min(int(r[0]) for r in rows)) / 1e6 if rows else 1.0
    ok = [int(r[2]) / 1000 for r in rows if r[1] == "200"]
    refused = [int(r[2]) / 1000 for r in rows if r[1] == "503"]
    return {
        "sent": len(rows),
        "sent_per_s": round(len(rows) / max(seconds, 1e-9)),
        "admitted_per_s": round(len(ok) / max(seconds, 1e-9)),
        "refused": len(refused),
        "refused_share": round(len(refused) / len(rows), 5) if rows else 0.0,
        "other": len(rows) - len(ok) - len(refused),
        "admitted_p50_ms": percentile(ok, 0.5),
        "admitted_p99_ms": percentile(ok, 0.99),
        "refusal_p99_ms": percentile(refused, 0.99),
    }


def refusals(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.split("\t")[1:2] == ["503"])


@contextlib.contextmanager
def neighbour() -> Iterator[str]:
    """A CPU-bound process beside the server for the duration of the block."""
    if shutil.which("stress-ng"):
        command, name = ["stress-ng", "--cpu", "1", "--timeout", "600s", "--quiet"], "stress-ng --cpu 1"
    else:
        command, name = [sys.executable, "-c", "while True: pass"], "a Python busy loop"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield name
    finally:
        process.terminate()
        process.wait()


def steps(
    mode: str, env: dict[str, str], args: argparse.Namespace, tmp: Path, body: Path
) -> Iterator[dict[str, object]]:
    server = start_server(f"overload-{mode}", "shared.adapters.http.asgi:app", {"CACHE_L1_SIZE": "0", **env})
    url = f"http://127.0.0.1:{server.port}/api/score"
    try:
        h2load(url, body, seconds=2, rate=None, connections=16)  # NOTE: warm-up
        closed_log = tmp / f"{mode}-closed.log"
        capacity = throughput(h2load(url, body, seconds=args.seconds, rate=None, connections=16, log=closed_log))
        base = {"admission": mode, "capacity_per_s": round(capacity)}
        yield base | {"step": "closed loop, 16 connections", "factor": None, "refused": refusals(closed_log)}
        if args.neighbour:  # NOTE: what the neighbour leaves: the neighbour steps are multiples of the capacity alone
            beside_log = tmp / f"{mode}-closed-beside.log"
            with neighbour() as busy:
                report = h2load(url, body, seconds=args.seconds, rate=None, connections=16, log=beside_log)
            yield base | {
                "step": f"closed loop, 16 connections, beside {busy}: {throughput(report):.0f} req/s",
                "factor": None,
                "refused": refusals(beside_log),
            }
        plan = [(UNLOADED, "")] + [(f, "") for f in args.factors] + [(f, "neighbour") for f in args.neighbour]
        for factor, beside in plan:
            log = tmp / f"{mode}-{factor}-{beside}.log"
            connections = args.connections if factor <= 1 else args.overload_connections
            with neighbour() if beside else contextlib.nullcontext("") as busy:
                h2load(url, body, seconds=args.seconds, rate=factor * capacity, connections=connections, log=log)
            label = "unloaded" if factor == UNLOADED else f"{factor}x" + (f", beside {busy}" if busy else "")
            yield base | {"step": label, "factor": factor, "connections": connections} | summarise(log)
    finally:
        server.stop()


def run(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="overload-"))
    body = tmp / "event.json"
    body.write_text(json.dumps(BODY))
    rows: list[dict[str, object]] = []
    modes: list[tuple[str, dict[str, str]]] = [("on", {})]
    if args.off:
        modes.append(("off", {"MAX_INFLIGHT": "0"}))
    for mode, env in modes:
        for row in steps(mode, env, args, tmp, body):
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {"connections": args.connections, "seconds": args.seconds, "runs": rows}


def table(results: dict[str, object]) -> str:
    lines = [
        "| admission | step | connections | capacity req/s | sent | sent req/s | refused | admitted p50 ms "
        "| admitted p99 ms | refusal p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:  # type: ignore[attr-defined]
        if r["factor"] is None:
            lines.append(f"| {r['admission']} | {r['step']} | 16 | {r['capacity_per_s']} | | | {r['refused']} | | | |")
            continue
        lines.append(
            f"| {r['admission']} | {r['step']} | {r['connections']} | {r['capacity_per_s']} | {r['sent']} | {r['sent_per_s']} | "
            f"{r['refused_share']:.2%} | {r['admitted_p50_ms']} | {r['admitted_p99_ms']} | {r['refusal_p99_ms']} |"
        )
    return "\n".join(lines)


def floats(text: str) -> list[float]:
    return [float(f) for f in text.split(",") if f]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--factors", type=floats, default=floats("0.3,0.5,0.8,1,2,3"))
    parser.add_argument("--neighbour", type=floats, default=floats("0.5,0.8"))
    parser.add_argument("--connections", type=int, default=64, help="open-loop connections up to 1x")
    parser.add_argument("--overload-connections", type=int, default=512, help="open-loop connections past 1x")
    parser.add_argument("--off", action="store_true", help="also run every step with admission control off")
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is missing: apt-get install nghttp2-client")
    results = run(args)
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    (out / "overload.json").write_text(json.dumps(results, indent=2))
    (out / "overload.md").write_text(table(results) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
