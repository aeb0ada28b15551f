"""The cache-hit path against the miss path, one identical event per decision, the server on a core of its own.

    .venv/bin/python -m bench.hits [--rounds 3] [--seconds 4] [--connections 16]

`make run`'s app (uvicorn, one worker, the embedded defaults, its prediction log to a directory) on
the machine's last core, wrk on the others: the server then has a core to itself, as a replica's
worker does, and what it serves is the app's figure, not the load generator's share of two cores
(on shared cores a hit answered at once leaves the server idle between requests, and every
sleep and wake-up is CPU on both sides that a batch-waiting miss does not pay; docs/benchmark.md).

Per round, in interleaved order: misses (every request a unique row), then for each decision the
same event over and over (`HIT_KEYS=1` from the event number that scores it so: approve, review,
decline; each checked by one request first: a hit that did not answer that decision is refused).
Reports medians of req/s and server CPU per request, and each hit path's req/s ÷ the miss path's
(the median of the per-round ratios). A run with any non-2xx answer, error or timeout reports nothing.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import urllib.request

import orjson

from bench.flashsale.measure import pin
from bench.loadgen import now_stamp
from bench.run import wrk
from bench.servers import cpu_s, start_app
from bench.verdicts import WorkNotDone
from bench.versus import rounds_parser

# the first event number (bench/wrk/score.lua's `event(n)`) that `make run`'s model decides so
HITS = {"approve": 0, "review": 499_000, "decline": 499_791}


def decision_of(port: int, n: int) -> str:
    """The decision for wrk's event `n` (its thread 0's id), from one request."""
    cents = n % 500_000
    body = (
        f'{{"event_id":"e-0-{n}","user_id":"u{n % 2000:05d}","amount":{1 + cents // 100}.{cents % 100:02d},'
        f'"currency":"USD","merchant_id":"m-{n % 97}","merchant_category":"5411",'
        f'"country":"{("US", "GB", "DE", "NG")[n % 4]}","channel":"{("web", "app", "pos")[n % 3]}",'
        f'"timestamp":"{now_stamp()}"}}'
    ).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/score", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
        return str(orjson.loads(answer.read())["decision"])


def run(mode: str, port: int, seconds: float, connections: int) -> dict[str, float]:
    if mode == "miss":
        os.environ.pop("HIT_OFFSET", None)
        return wrk(port, seconds, connections, "miss")
    os.environ["HIT_KEYS"], os.environ["HIT_OFFSET"] = "1", str(HITS[mode])
    return wrk(port, seconds, connections, "hit")


def main() -> None:
    args = rounds_parser(__doc__, rounds=3, seconds=4.0).parse_args()
    env = {"PREDICTION_LOG": "dir", "PREDICTION_LOG_DIR": tempfile.mkdtemp(prefix="bench-hits-")}
    load_before = os.getloadavg()[0]
    server = start_app("hits", env)
    pinned = pin(server.process.pid)
    modes = ("miss", *HITS)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    try:
        for decision, n in HITS.items():
            if (got := decision_of(server.port, n)) != decision:
                raise WorkNotDone(f"event {n} is decided {got!r}, not {decision!r}: the {decision} hit is not measured")
        for mode in modes:
            run(mode, server.port, 1, args.connections)  # warm: models, caches, the hit's L1 entry
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                cpu = cpu_s(server.process.pid)
                figures = run(mode, server.port, args.seconds, args.connections)
                if figures["errors"]:
                    raise WorkNotDone(f"{mode}: {figures['errors']:.0f} requests failed or were refused: not reported")
                figures["cpu_us"] = (cpu_s(server.process.pid) - cpu) / max(figures["requests"], 1) * 1e6
                results[mode].append(figures)
    finally:
        server.stop()
        if pinned:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
    print(f"/api/score, make run's defaults, {args.connections} connections, {args.rounds} interleaved rounds of "
          f"{args.seconds:g} s; server pinned to its own core: {pinned}; load average {load_before:.2f} -> "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| path | req/s | CPU µs a request | p99 ms | req/s ÷ miss (median of rounds) |")
    print("|---|---:|---:|---:|---:|")
    for mode in modes:
        runs = results[mode]
        ratio = statistics.median(a["rps"] / b["rps"] for a, b in zip(runs, results["miss"], strict=True))
        label = "miss (unique rows)" if mode == "miss" else f"hit, one {mode} event"
        print(
            f"| {label} | {statistics.median(x['rps'] for x in runs):,.0f} | "
            f"{statistics.median(x['cpu_us'] for x in runs):.1f} | {statistics.median(x['p99_ms'] for x in runs):.2f} "
            f"| {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
