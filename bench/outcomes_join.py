"""The outcome report's join at scale: N decisions and M outcomes, its time and peak memory.

    python -m bench.outcomes_join --decisions 1000000 --outcomes 20000 [--dir /tmp/join]

Writes a log tree as the service writes it (decision lines through `encode_records`, the writer's
own encoder; outcome lines through `OutcomeStore`'s `outcome_line`), 24 hours of one model's two
versions, then times `report.build` over it in a child process and reads the child's peak RSS
(ru_maxrss). It checks the work it names: the report's decision count equals N and its outcome
count equals M.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

START = datetime(2026, 6, 1, tzinfo=UTC)
KEY = b"bench"


def write_tree(root: Path, decisions: int, outcomes: int) -> None:
    from shared.domain.outcomes import Outcome, outcome_line
    from shared.domain.records import DecisionRecord, encode_lines, encode_records, hashed_id
    from shared.domain.spec import Thresholds

    columns = ("amount", "user_avg_amount_30d", "user_txn_count_24h", "hour_of_day", "is_foreign", "merchant_risk")
    rng = np.random.default_rng(57)
    scores = rng.random(decisions)
    row = np.array([120.5, 50.0, 3.0, 10.0, 1.0, 0.25], dtype=np.float32)
    per_hour = decisions // 24 + 1
    for hour in range(24):
        at = (START + timedelta(hours=hour)).timestamp()
        for version in ("3", "4"):
            records = [
                DecisionRecord(
                    at + (i % 3600), "queue", f"evt-{i}", "fraud", version, "f", columns, row, {},
                    float(scores[i]), "decline" if scores[i] >= 0.8 else "review" if scores[i] >= 0.5 else "approve",
                    "model", {"model": 0.1}, thresholds=Thresholds(0.5, 0.8),
                )
                for i in range(hour * per_hour, min(decisions, (hour + 1) * per_hour))
                if (i % 2 == 0) == (version == "3")
            ]  # fmt: skip
            if not records:
                continue
            path = root / f"model=fraud/version={version}/date=2026-06-01/hour={hour:02d}/r1.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                for k in range(0, len(records), 10_000):
                    out.write(encode_records(records[k : k + 10_000], KEY))
    learned = START + timedelta(days=60)
    picked = rng.choice(decisions, size=outcomes, replace=False)
    lines = [
        outcome_line(
            Outcome(f"evt-{i}", "fraud" if scores[i] > rng.random() else "legit", "chargeback", learned, 50.0),
            hashed_id(f"evt-{i}", KEY),
            learned + timedelta(microseconds=n),
        )
        for n, i in enumerate(picked)
    ]
    path = root / "outcomes/date=2026-07-31/hour=00/r1.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_lines(lines))


def measure(root: Path) -> dict[str, float]:
    """In this (child) process: the report's time, its peak RSS and what it counted."""
    from shared.stores.prediction_log import report

    started = time.perf_counter()
    built = report.build(root, today=START.date() + timedelta(days=200))
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "decisions": sum(r["decisions"] for r in built.rows),
        "outcomes": built.outcomes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--outcomes", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=Path("bench-out/outcomes-join"))
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.dir)))
        return 0
    started = time.perf_counter()
    write_tree(args.dir, args.decisions, args.outcomes)
    written = time.perf_counter() - started
    size = sum(p.stat().st_size for p in args.dir.rglob("*.jsonl")) / 2**20
    child = subprocess.run(
        [sys.executable, "-m", "bench.outcomes_join", "--measure", "--dir", str(args.dir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    figures = json.loads(child.stdout)
    ok = figures["decisions"] == args.decisions and figures["outcomes"] == args.outcomes
    print(
        f"{args.decisions:,} decisions, {args.outcomes:,} outcomes, {size:,.0f} MiB of JSONL (written in {written:.1f} s): "
        f"join {figures['seconds']:.2f} s, peak RSS {figures['peak_rss_mib']:,.0f} MiB; "
        f"verdict: {'counted every decision and outcome' if ok else 'MISCOUNTED ' + json.dumps(figures)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
