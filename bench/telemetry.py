"""The overhead of telemetry on /api/score: the app twice, TELEMETRY=false and true, in one run.

    .venv/bin/python -m bench.telemetry [--rounds 5 --seconds 5 --connections 16]

Both servers (uvicorn, one worker each, embedded defaults: no Redis) run side by side; wrk
drives one at a time, in interleaved rounds (off, on, on, off, ...), for cache misses and
cache hits. Medians of req/s and p99 are reported, with the on/off ratio. With telemetry on,
the defaults trace 1% of requests (TRACE_SAMPLE_RATIO) and `/api/metrics` is scraped once a
round, as a Prometheus would. A third server, `untraced` (TRACE_SAMPLE_RATIO=0), splits the
cost between the metrics and the sampled requests' spans.
"""

from __future__ import annotations

import statistics
import urllib.request

from bench.servers import start_app
from bench.versus import interleaved, rounds_parser

VARIANTS = {
    "off": {"TELEMETRY": "false"},
    "on": {"TELEMETRY": "true"},  # the defaults: metrics, and 1% of requests traced
    "untraced": {"TELEMETRY": "true", "TRACE_SAMPLE_RATIO": "0"},  # metrics alone: what the spans cost is the gap
}


def main() -> None:
    args = rounds_parser(__doc__, rounds=5, seconds=5.0).parse_args()
    servers = {
        name: start_app(f"telemetry-{name}", {"GC_GEN0_THRESHOLD": "50000", **env}) for name, env in VARIANTS.items()
    }

    def scrape() -> None:  # NOTE: once a round, as a Prometheus would
        with urllib.request.urlopen(f"http://127.0.0.1:{servers['on'].port}/api/metrics", timeout=5) as scraped:
            assert scraped.status == 200

    try:
        results = interleaved(servers, args.rounds, args.seconds, args.connections, after_round=scrape)
    finally:
        for server in servers.values():
            server.stop()
    print(
        f"/api/score, {args.connections} connections, {args.rounds} interleaved rounds of {args.seconds:.0f} s, medians"
    )
    print(f"{'mode':6} {'telemetry':9} {'req/s':>9} {'p99 ms':>8} {'CPU µs':>8} {'errors':>7} {'req/s ÷ off':>12}")
    for mode in ("miss", "hit"):
        off = results[(mode, "off")]
        for name in servers:
            runs = results[(mode, name)]
            med = {k: statistics.median(run[k] for run in runs) for k in ("rps", "p99_ms", "cpu_us", "errors")}
            ratio = statistics.median(r["rps"] / o["rps"] for r, o in zip(runs, off, strict=True))
            print(
                f"{mode:6} {name:9} {med['rps']:9.0f} {med['p99_ms']:8.2f} {med['cpu_us']:8.1f} "
                f"{med['errors']:7.0f} {ratio:12.3f}"
            )


if __name__ == "__main__":
    main()
