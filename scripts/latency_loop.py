"""A simple local loop: sequential POST /api/score against a running app; prints medians.

    make run &            # in another terminal
    .venv/bin/python scripts/latency_loop.py [--url http://127.0.0.1:7071] [-n 2000]

Each iteration sends a new event (cache miss) and then the same features again (cache hit).
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from shared.domain.events import EXAMPLE_EVENT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:7071")
    parser.add_argument("-n", type=int, default=2000)
    args = parser.parse_args()
    event = {k: v for k, v in EXAMPLE_EVENT.items() if k not in ("event_id", "amount", "note")}
    samples: dict[str, list[float]] = {"miss": [], "hit": []}
    with httpx.Client(base_url=args.url) as client:
        for i in range(args.n):
            body = {**event, "event_id": f"loop-{i}", "amount": 10.0 + i / 100}
            for kind in ("miss", "hit"):
                started = time.perf_counter()
                response = client.post("/api/score", json=body)
                samples[kind].append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
    for kind, values in samples.items():
        values.sort()
        print(
            f"/api/score {kind}: median {statistics.median(values):.3f} ms, p99 {values[int(0.99 * len(values))]:.3f} ms "
            f"over {len(values)} sequential requests"
        )


if __name__ == "__main__":
    main()
