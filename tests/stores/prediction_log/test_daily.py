"""The daily outcomes report: its headline over mature days only (current against the version's own
trailing baseline), the gauges it publishes, and the timer function itself (function_app.py, the runtime's
own TimerRequest converter) over a log in Azurite, read back with `--blob` as a person would."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient

from shared.domain.outcomes import Outcome
from shared.settings import PredictionLogPolicy
from shared.stores.outcomes import MemoryMarks, OutcomeStore
from shared.stores.prediction_log import daily, report
from shared.stores.prediction_log.log import PredictionLog
from shared.stores.prediction_log.sinks import BlobSink, DirectorySink, Sink, outcome_name
from shared.telemetry import metrics
from tests.stores.prediction_log import decision

REPO = Path(__file__).resolve().parents[3]
KEY = "daily-key"
POLICY = PredictionLogPolicy(sink="dir", flush_s=0.05, hash_key=KEY)
TODAY = date(2026, 12, 1)
NEWEST = TODAY - timedelta(days=report.MATURITY_DAYS + 1)  # the newest mature day with decisions


def noon(day: date) -> float:
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp()


# per day: (its offset from NEWEST, frauds declined, frauds approved, legit declined)
DAYS = {
    "too old": (-40, 0, 9, 0),  # before the 28-day baseline: never counted
    "baseline a": (-20, 8, 2, 2),
    "baseline b": (-10, 9, 1, 1),
    "current a": (-3, 3, 3, 1),
    "current b": (0, 2, 4, 1),
    "immature": (report.MATURITY_DAYS - 5, 10, 0, 0),  # labels still arriving: never counted
}


async def logged(decisions: Sink, outcomes: Sink) -> None:
    log = PredictionLog(POLICY, decisions, replica="r1")
    labels: list[Outcome] = []
    n = 0
    for offset, caught, missed, false_declines in DAYS.values():
        at = noon(NEWEST + timedelta(days=offset))
        for score, kind, count in ((0.95, "fraud", caught), (0.1, "fraud", missed), (0.9, "legit", false_declines)):
            for _ in range(count):
                log.add(decision(n, at=at, score=score))
                learned = datetime.fromtimestamp(at, UTC) + timedelta(days=3)
                labels.append(Outcome(f"evt-{n}", kind, "chargeback", learned, 50.0 if kind == "fraud" else None))  # type: ignore[arg-type]
                n += 1
        log.add(decision(n, at=at, score=0.2))  # one decision a day still awaiting its outcome
        n += 1
    await log.aclose()
    store = OutcomeStore(outcomes, MemoryMarks(), KEY.encode())
    await store.take(labels, datetime.now(UTC))
    await store.aclose()


def by_window(found: list[daily.Headline]) -> dict[str, daily.Headline]:
    return {h.window: h for h in found if (h.version, h.role) == ("3", "live")}


async def test_the_headline_holds_the_newest_mature_week_to_its_own_trailing_baseline(tmp_path: Path) -> None:
    await logged(DirectorySink(tmp_path, "r1"), DirectorySink(tmp_path, "r1", names=outcome_name))
    found = by_window(daily.headlines(report.build(tmp_path, today=TODAY)))
    current, baseline = found["current"], found["baseline"]
    assert (current.days, current.fraud, current.recall) == (2, 12, pytest.approx(5 / 12))
    assert current.precision == pytest.approx(5 / 7)
    assert current.missed_amount == pytest.approx(7 * 50.0)
    assert (baseline.days, baseline.fraud, baseline.recall) == (2, 20, pytest.approx(17 / 20))  # not the day too old
    assert baseline.precision == pytest.approx(17 / 20)


async def test_the_immature_share_counts_decisions_on_days_inside_the_window(tmp_path: Path) -> None:
    await logged(DirectorySink(tmp_path, "r1"), DirectorySink(tmp_path, "r1", names=outcome_name))
    shares = daily.immature_shares(report.build(tmp_path, today=TODAY))
    every = sum(caught + missed + fd + 1 for _, caught, missed, fd in DAYS.values())
    assert shares[("fraud", "3", "live")] == pytest.approx(11 / every)


def test_the_gauges_are_replaced_whole_each_run() -> None:
    old = daily.Headline("fraud", "2", "live", "current", 7, 10, 0.5, 0.5, 10.0)
    new = daily.Headline("fraud", "3", "live", "current", 7, 10, None, 0.9, 20.0)
    daily.publish([old], {("fraud", "2", "live"): 0.3})
    daily.publish([new], {("fraud", "3", "live"): 0.4}, 3)
    gauges = {i.spec.name: dict(i.values) for i in metrics.instruments() if i.spec.name.startswith("scoring.outcomes.")}
    assert gauges["scoring.outcomes.recall"] == {}  # no fraud, no recall: absent, never 0 or 1
    assert gauges["scoring.outcomes.precision"] == {("fraud", "3", "live", "current"): 0.9}
    assert gauges["scoring.outcomes.missed.amount"] == {("fraud", "3", "live", "current"): 20.0}
    assert gauges["scoring.outcomes.immature.ratio"] == {("fraud", "3", "live"): 0.4}
    assert gauges["scoring.outcomes.unmatched"] == {(): 3}
    daily.publish([], {})


@pytest.fixture
def container(azurite_connection: str) -> Iterator[ContainerClient]:
    client = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(
        f"daily-{uuid.uuid4().hex[:12]}"
    )
    yield client
    with contextlib.suppress(ResourceNotFoundError):
        client.delete_container()


TIMER = """
import asyncio, json, sys
from azure.functions import meta
from azure.functions.timer import TimerRequestConverter
import function_app
from shared.telemetry import metrics

async def main():
    datum = meta.Datum(type="json", value=json.dumps({"IsPastDue": False, "ScheduleStatus": {}, "Schedule": {}}))
    timer = TimerRequestConverter.decode(datum, trigger_metadata={})
    fn = {f.get_function_name(): f.get_user_function() for f in function_app.app.get_functions()}["outcomes_report"]
    await fn(timer)
    found = {i.spec.name: [[list(k), v] for k, v in i.values.items()] for i in metrics.instruments()
             if i.spec.name.startswith("scoring.outcomes.")}
    print(json.dumps(found))

asyncio.run(main())
"""


def run_python(code_or_args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=REPO, capture_output=True, text=True, timeout=120, env=environ
    )


async def test_the_timer_function_writes_the_report_into_the_container_and_sets_the_gauges(
    container: ContainerClient, azurite_connection: str
) -> None:
    def sink(names: object = None) -> BlobSink:
        extra = {} if names is None else {"names": names}
        return BlobSink.connect(
            container=container.container_name, connection_string=azurite_connection, blob_uri=None,
            replica="r1", **extra,
        )  # fmt: skip

    await logged(sink(), sink(outcome_name))
    env = {"ModelStorage": azurite_connection, "PREDICTION_LOG": "blob", "PREDICTION_LOG_HASH_KEY": KEY,
           "PREDICTION_LOG_CONTAINER": container.container_name}  # fmt: skip
    done = run_python(["-c", TIMER], env)
    assert done.returncode == 0, done.stderr[-3000:]
    gauges = json.loads(done.stdout.strip().splitlines()[-1])
    # the run's today is the clock's (a few days past TODAY): the same days are mature, the same one immature
    recall = {tuple(k): v for k, v in gauges["scoring.outcomes.recall"]}
    assert recall == {("fraud", "3", "live", "current"): pytest.approx(5 / 12),
                      ("fraud", "3", "live", "baseline"): pytest.approx(17 / 20)}  # fmt: skip
    assert [k for k, _ in gauges["scoring.outcomes.immature.ratio"]] == [["fraud", "3", "live"]]
    assert gauges["scoring.outcomes.unmatched"] == [[[], 0]]  # every outcome found its decision
    reports = [b.name for b in container.list_blobs(name_starts_with="reports/outcomes/")]
    assert len(reports) == 1 and reports[0].startswith(f"reports/outcomes/date={datetime.now(UTC).date()}/")
    written = json.loads(container.download_blob(reports[0]).readall())
    assert written["headlines"] and written["rows"]

    container.upload_blob("outcomes/notes.txt", b"not the log's layout: never copied")
    shown = run_python(["-m", "shared.stores.prediction_log.report", "--blob"], env)
    assert shown.returncode == 0, shown.stderr[-3000:]
    # six days' decisions and one hour's outcomes: neither the report written beside them nor a stray object
    assert shown.stdout.splitlines()[0].startswith("read 7 objects")
    assert "IMMATURE" in shown.stdout and "unmatched (no decision found yet): 0" in shown.stdout
