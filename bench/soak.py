"""A long run under sustained load: does memory stay flat, and the local log under its cap?

    python -m bench.soak [--minutes 20] [--connections 8] [--out bench-out]     # make soak

Two app servers side by side, as `make run` starts them (the embedded default: the committed
model, the features file, no Redis): one with the prediction log on (PREDICTION_LOG=dir, its
cap DIRECTORY_CAP, shared/stores/prediction_log/sinks.py), one with it off. Every minute both
take `/api/score` misses from a wrk of their own for the whole minute; after each minute the
resident memory of each server and its children, the requests it answered that minute, its
p99, and the log directory's size.

Writes bench-out/soak.json and prints a table a minute; the figures are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.run import say, wrk
from bench.servers import Server, rss_mib, start_server

APP = "shared.adapters.http.asgi:app"


def directory_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / (1 << 20)


def minute(servers: dict[str, Server], seconds: float, connections: int) -> dict[str, dict[str, float]]:
    """Both servers under wrk at once for `seconds`: each one's run."""
    runs: dict[str, dict[str, float]] = {}

    def drive(name: str, server: Server) -> None:
        runs[name] = wrk(server.port, seconds, connections, "miss")

    threads = [threading.Thread(target=drive, args=item) for item in servers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of one 'minute' (shorter to try it)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="soak-log-"))
    servers = {
        "log on": start_server("soak-on", APP, {"PREDICTION_LOG": "dir", "PREDICTION_LOG_DIR": str(logs)}),
        "log off": start_server("soak-off", APP, {"PREDICTION_LOG": "off"}),
    }
    rows: list[dict[str, Any]] = []
    try:
        for n in range(1, args.minutes + 1):
            runs = minute(servers, args.seconds, args.connections)
            row: dict[str, Any] = {"minute": n, "log_mib": round(directory_mib(logs), 1)}
            for name, server in servers.items():
                row[name] = {
                    "rss_mib": round(rss_mib(server.process.pid), 1),
                    "rps": round(runs[name]["rps"]),
                    "p99_ms": round(runs[name]["p99_ms"], 2),
                    "errors": runs[name]["errors"],
                }
            rows.append(row)
            on, off = row["log on"], row["log off"]
            say(
                f"minute {n:2d}: log on {on['rss_mib']:6.1f} MiB {on['rps']:6d} req/s p99 {on['p99_ms']:5.2f} ms"
                f" · log off {off['rss_mib']:6.1f} MiB {off['rps']:6d} req/s · log dir {row['log_mib']} MiB"
            )
    finally:
        for server in servers.values():
            server.stop()
    summary = {name: _drift(rows, name) for name in servers}
    result = {"command": "python -m bench.soak " + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes": rows, "summary": summary,
              "log_dir_max_mib": max(r["log_mib"] for r in rows)}  # fmt: skip
    (args.out / "soak.json").write_text(json.dumps(result, indent=2))
    say(f"summary: {json.dumps(summary)}; log dir at most {result['log_dir_max_mib']} MiB")


def _drift(rows: list[dict[str, Any]], name: str) -> dict[str, float]:
    """RSS and req/s at minute 5 against the last minute (the soak's check: within 5%)."""
    early = rows[min(4, len(rows) - 1)][name]
    late = rows[-1][name]
    return {
        "rss_mib_at_5": early["rss_mib"],
        "rss_mib_at_end": late["rss_mib"],
        "rss_change": round(late["rss_mib"] / early["rss_mib"] - 1, 4),
        "rps_at_5": early["rps"],
        "rps_at_end": late["rps"],
        "rps_change": round(late["rps"] / max(early["rps"], 1) - 1, 4),
    }


if __name__ == "__main__":
    main()
