"""The daily outcomes report (the `outcomes_report` timer, function_app.py): into the log's store, its
headline as gauges.

    run(settings, today)     the report over the prediction log (PREDICTION_LOG=dir: its directory;
                             blob: its container, read through `reader.mirror`), written beside it as
                             `reports/outcomes/date={today}/{HHMMSS}.json` (a new object each run:
                             the container's WORM retention forbids overwriting one), then `publish`
    headlines(report)        per model, version and role, over MATURE days only: recall, precision and
                             the fraud amount missed of the newest CURRENT_DAYS mature days
                             (`current`) and of the BASELINE_DAYS mature days before them
                             (`baseline`); and the share of its decisions on immature days
    publish(...)             the gauges `scoring.outcomes.*` (shared/telemetry/catalogue.py; and the
                             outcomes no decision matches yet, `unmatched`), replaced
                             whole each run (a retired version's series end); the alerts in
                             infra/modules/alerts.bicep compare `current` with `baseline`

A day inside the maturity window never enters `current` or `baseline`: its chargebacks are still
arriving, so its recall reads high and its precision low for no fault of the model.

DuckDB runs in a worker thread (never on the loop the scoring shares), with one thread and a memory
cap (DUCKDB_MEMORY): past it DuckDB spills to its temporary directory instead of growing the replica.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import msgspec

from shared.settings import Settings
from shared.stores.prediction_log.report import MATURITY_DAYS, Report, build
from shared.telemetry import metrics

__all__ = ["BASELINE_DAYS", "CURRENT_DAYS", "Daily", "Headline", "headlines", "immature_shares", "publish", "run"]

log = logging.getLogger(__name__)
CURRENT_DAYS = 7  # the newest mature days, pooled: one day's handful of frauds is noise
BASELINE_DAYS = 28  # the version's own trailing baseline, the mature days before those
DUCKDB_MEMORY = "1GB"  # on a serving replica: DuckDB spills past it rather than take the models' memory
Window = Literal["current", "baseline"]
Key = tuple[str, str, str]  # model, version, role


@dataclass(frozen=True)
class Headline:
    """One version's figures over one window of mature days (None: no fraud or no labelled decline)."""

    model: str
    version: str
    role: str
    window: Window
    days: int  # mature days in the window with decisions
    fraud: int
    recall: float | None
    precision: float | None
    missed_amount: float


@dataclass(frozen=True)
class Daily:
    """What a run computed and where it wrote it."""

    report: Report
    headlines: list[Headline]
    immature: dict[Key, float]
    written_to: str


def headlines(report: Report) -> list[Headline]:
    """Per (model, version, role): `current` over its newest CURRENT_DAYS mature days, `baseline`
    over the BASELINE_DAYS before them (calendar days, counted back from its newest mature day)."""
    mature: dict[Key, list[dict[str, Any]]] = {}
    for row in report.rows:
        if row["mature"]:
            mature.setdefault((row["model"], row["version"], row["role"]), []).append(row)
    found = []
    for key, rows in mature.items():
        newest: date = max(r["day"] for r in rows)
        current_from = newest - timedelta(days=CURRENT_DAYS - 1)
        baseline_from = current_from - timedelta(days=BASELINE_DAYS)
        found.append(_pooled(key, "current", [r for r in rows if r["day"] >= current_from]))
        before = [r for r in rows if baseline_from <= r["day"] < current_from]
        if before:
            found.append(_pooled(key, "baseline", before))
    return found


def _pooled(key: Key, window: Window, rows: list[dict[str, Any]]) -> Headline:
    fraud = sum(r["fraud"] for r in rows)
    caught = sum(r["caught"] for r in rows)
    declines = sum(r["labelled_declines"] for r in rows)
    return Headline(
        *key,
        window,
        len(rows),
        fraud,
        caught / fraud if fraud else None,
        caught / declines if declines else None,
        float(sum(r["missed_amount"] for r in rows)),
    )


def immature_shares(report: Report) -> dict[Key, float]:
    """Per (model, version, role): the share of its decisions on days inside the maturity window."""
    totals: dict[Key, list[int]] = {}
    for row in report.rows:
        counts = totals.setdefault((row["model"], row["version"], row["role"]), [0, 0])
        counts[0] += row["decisions"] if not row["mature"] else 0
        counts[1] += row["decisions"]
    return {key: young / every for key, (young, every) in totals.items() if every}


NAMES = ("scoring.outcomes.recall", "scoring.outcomes.precision", "scoring.outcomes.missed.amount")
IMMATURE = "scoring.outcomes.immature.ratio"
UNMATCHED = "scoring.outcomes.unmatched"


def publish(found: Iterable[Headline], immature: dict[Key, float], unmatched: int | None = None) -> None:
    """The gauges, replaced whole: what this run computed, nothing of an earlier run's."""
    gauges = {
        i.spec.name: i
        for i in metrics.instruments()
        if isinstance(i, metrics.Gauge) and i.spec.name in (*NAMES, IMMATURE, UNMATCHED)
    }
    for gauge in gauges.values():
        gauge.values.clear()
    for h in found:
        key = (h.model, h.version, h.role, h.window)
        for name, value in zip(NAMES, (h.recall, h.precision, h.missed_amount), strict=True):
            if value is not None:
                gauges[name].set(key, value)
    for (model, version, role), share in immature.items():
        gauges[IMMATURE].set((model, version, role), share)
    if unmatched is not None:
        gauges[UNMATCHED].set((), unmatched)


async def run(settings: Settings, today: date | None = None, *, maturity_days: int = MATURITY_DAYS) -> Daily:
    """Compute, write and publish the day's report (in a worker thread); `ValueError` when the log is off."""
    daily = await asyncio.to_thread(_compute, settings, today or datetime.now(UTC).date(), maturity_days)
    publish(daily.headlines, daily.immature, daily.report.unmatched)
    log.info("outcomes report written to %s: %d headline figures", daily.written_to, len(daily.headlines))
    return daily


def _compute(settings: Settings, today: date, maturity_days: int) -> Daily:
    policy = settings.prediction_log
    # NOTE: spills under the system's temporary directory, not DuckDB's default `.tmp` beside the app's code
    config = {
        "threads": 1,
        "memory_limit": DUCKDB_MEMORY,
        "temp_directory": str(Path(tempfile.gettempdir()) / "duckdb"),
    }
    if policy.sink == "dir":
        root = Path(policy.directory)
        report = build(root, today=today, maturity_days=maturity_days, config=config)
        name = _report_name(today)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(_encoded(report, today))
        return Daily(report, headlines(report), immature_shares(report), str(root / name))
    if policy.sink != "blob":
        raise ValueError("the outcomes report reads the prediction log: set PREDICTION_LOG=dir or blob")
    from shared.stores.prediction_log.reader import blob_container, mirror

    container = blob_container(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="outcomes-") as scratch:
            mirror(container, Path(scratch))
            report = build(Path(scratch), today=today, maturity_days=maturity_days, config=config)
        name = _report_name(today)
        container.upload_blob(name, _encoded(report, today), overwrite=False)
        return Daily(report, headlines(report), immature_shares(report), f"{container.container_name}/{name}")
    finally:
        container.close()


def _report_name(today: date) -> str:
    return f"reports/outcomes/date={today.isoformat()}/{datetime.now(UTC).strftime('%H%M%S%f')}.json"


def _encoded(report: Report, today: date) -> bytes:
    doc = {"today": today, "outcomes": report.outcomes, "unmatched": report.unmatched, "lapsed": report.lapsed,
           "headlines": headlines(report), "rows": report.rows}  # fmt: skip
    return msgspec.json.encode(doc)
