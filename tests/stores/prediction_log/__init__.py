"""The prediction log against a real directory and a real Azurite; plausible records to log.

`decision(i, ...)` builds the DecisionRecord the core would for event `evt-{i}`: a float32 row
over the tiny fraud model's columns, a defaulted feature now and then, timings as the answer
holds them. `lines_of(path)` reads a JSONL object back; `balanced(stats)` is the accounting
invariant every test checks at rest.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from shared.domain.answers import PredictionLogStats
from shared.domain.records import DecisionRecord
from shared.domain.spec import Thresholds

COLUMNS = ("amount", "user_avg_amount_30d", "user_txn_count_24h", "hour_of_day", "is_foreign", "merchant_risk")
HOUR_10 = datetime(2026, 12, 1, 10, 15, tzinfo=UTC).timestamp()  # 2026-12-01T10:15Z
DECISIONS = ("approve", "review", "decline")


def decision(
    i: int = 0,
    *,
    at: float = HOUR_10,
    model: str = "fraud",
    version: str = "3",
    score: float | None = None,
    columns: tuple[str, ...] = COLUMNS,
) -> DecisionRecord:
    """The record of event `evt-{i}` (score and decision vary with i; every 7th has a defaulted feature)."""
    score = (i * 37 % 100) / 100 if score is None else score
    row = np.array([120.5 + i, 50.0, 3.0, 10.0, 1.0, 0.25], dtype=np.float32)
    return DecisionRecord(
        at=at + (i % 600) / 10,
        via="http",
        event_id=f"evt-{i}",
        model=model,
        version=version,
        fingerprint="9f2c41d7e0ab",
        columns=columns,
        row=row,
        defaulted={"user_avg_amount_30d": "missing"} if i % 7 == 0 else {},
        score=score,
        decision="approve" if score < 0.5 else "review" if score < 0.8 else "decline",
        reason="model",
        timings={"parse": 0.02, "features": 0.11, "model": 0.09},
        thresholds=Thresholds(0.5, 0.8),
    )


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def balanced(stats: PredictionLogStats) -> bool:
    """recorded == written + dropped (each way) + buffered: every record offered ends in one count."""
    ended = stats.written + stats.dropped_full + stats.dropped_sink + stats.dropped_shutdown + stats.buffered
    return stats.recorded == ended


async def eventually(check: Callable[[], bool], within_s: float = 10.0, what: str = "it") -> None:
    """Wait (polling every 10 ms) until `check()` holds; fail after `within_s`."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.01)
