"""The reader: a time range read back (hours outside it never opened), summed up, as a DataFrame."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient

from shared.domain.answers import ReasonCode
from shared.domain.records import DecisionRecord, Shadowed, hashed_id
from shared.settings import PredictionLogPolicy
from shared.stores.prediction_log import reader
from shared.stores.prediction_log.log import PredictionLog
from shared.stores.prediction_log.sinks import BlobSink, DirectorySink, Sink
from tests.stores.prediction_log import HOUR_10, decision

REPO = Path(__file__).resolve().parents[3]
POLICY = PredictionLogPolicy(sink="dir", flush_s=0.05)
HAS_PANDAS = importlib.util.find_spec("pandas") is not None


async def logged(sink: Sink) -> None:
    """Hours 10, 11 and 12 of fraud/3 (100, 50, 20 records), 30 of fraud/4 in hour 10 with a shadow of 5."""
    log = PredictionLog(POLICY, sink, replica="r1")
    for i in range(100):
        log.add(decision(i))
    for i in range(50):
        log.add(decision(i, at=HOUR_10 + 3600))
    for i in range(20):
        log.add(decision(i, at=HOUR_10 + 7200))
    for i in range(30):
        record = decision(i, version="4")
        record.shadow = Shadowed("5", record.score if i % 3 else 0.99, record.decision if i % 3 else "decline")
        record.reasons = [ReasonCode("amount", 150.5, 80.0, 0.31), ReasonCode("merchant_risk", 0.25, 0.1, 0.12)]
        log.add(record)
    await log.aclose()


@pytest.fixture
async def directory(tmp_path: Path) -> Path:
    await logged(DirectorySink(tmp_path, "r1"))
    return tmp_path


def at(text: str) -> datetime:
    return reader.parse_time(text)


def test_times_read_as_utc_to_the_hour_or_finer() -> None:
    assert at("2026-12-01T10") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert at("2026-12-01") == datetime(2026, 12, 1, tzinfo=UTC)
    assert at("2026-12-01T11:30+01:00") == datetime(2026, 12, 1, 10, 30, tzinfo=UTC)


def test_a_range_reads_only_its_hours(directory: Path) -> None:
    assert len(reader.load(directory)) == 200
    assert len(reader.load(directory, since=at("2026-12-01T11"))) == 70
    assert len(reader.load(directory, since=at("2026-12-01T11"), until=at("2026-12-01T12"))) == 50
    assert len(reader.load(directory, until=at("2026-12-01T11"), model="fraud", version="4")) == 30
    assert reader.load(directory, model="other") == []


def test_an_hour_outside_the_range_is_never_opened(directory: Path) -> None:
    trap = directory / "model=fraud/version=3/date=2026-11-30/hour=23/r9.jsonl"
    trap.mkdir(parents=True)  # NOTE: a folder where a file should be: reading it would raise
    assert len(reader.load(directory, since=at("2026-12-01"))) == 200
    with pytest.raises(IsADirectoryError):
        reader.load(directory)


def test_records_inside_an_hour_are_cut_at_the_ends_of_the_range(directory: Path) -> None:
    # decision(i) is at 10:15 + (i % 600) / 10 s: i = 0..99 spans 10:15:00 to 10:15:09.9
    records = reader.load(directory, since=at("2026-12-01T10:15:05"), until=at("2026-12-01T10:15:07"), version="3")
    assert len(records) == 20
    assert all("2026-12-01T10:15:05" <= r["at"] < "2026-12-01T10:15:07" for r in records)


def test_a_line_still_being_written_is_left_for_later(directory: Path) -> None:
    path = directory / "model=fraud/version=3/date=2026-12-01/hour=12/r1.jsonl"
    with path.open("ab") as f:
        f.write(b'{"event":"half a li')
    assert len(reader.load(directory, since=at("2026-12-01T12"))) == 20


def test_the_summary_counts_shares_quantiles_defaults_shadow_and_reasons(directory: Path) -> None:
    summary = reader.summarize(reader.load(directory, until=at("2026-12-01T11")))
    assert summary.records == 130
    assert summary.versions == {"fraud/3": 100, "fraud/4": 30}
    scores = sorted([(i * 37 % 100) / 100 for i in range(100)] + [(i * 37 % 100) / 100 for i in range(30)])
    assert summary.scores == {"p50": scores[64], "p90": scores[116], "p99": scores[128]}
    expected = sum(1 for s in scores if s < 0.5)
    assert summary.decisions["approve"] == expected and summary.share("approve") == pytest.approx(expected / 130)
    assert summary.defaulted == {"user_avg_amount_30d": pytest.approx((15 + 5) / 130)}  # every 7th of each
    shadow = summary.shadow["fraud/5"]
    assert (shadow.compared, shadow.failed) == (30, 0)
    assert shadow.agreed == 20 + sum(1 for i in range(0, 30, 3) if (i * 37 % 100) / 100 >= 0.8)
    assert summary.reasons == {"amount": 30, "merchant_risk": 30}
    text = reader.render(summary)
    assert "records            130" in text and "fraud/5: 30 compared" in text and "amount 30" in text


def test_an_empty_range_sums_to_nothing(directory: Path) -> None:
    assert reader.render(reader.summarize(reader.load(directory, since=at("2027-01-01")))) == "records            0\n"


@pytest.fixture
def container(azurite_connection: str) -> Iterator[ContainerClient]:
    """A container of the test's own in Azurite (removed after it)."""
    client = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(
        f"predlog-{uuid.uuid4().hex[:12]}"
    )
    yield client
    with contextlib.suppress(ResourceNotFoundError):
        client.delete_container()


async def test_the_blob_log_reads_back_as_the_directory_does(
    container: ContainerClient, azurite_connection: str, directory: Path
) -> None:
    await logged(
        BlobSink.connect(
            container=container.container_name, connection_string=azurite_connection, blob_uri=None, replica="r1"
        )
    )
    for wanted in ({}, {"since": at("2026-12-01T11")}, {"model": "fraud", "version": "4"}):
        assert reader.load(container, **wanted) == reader.load(directory, **wanted)
    assert len(reader.load(container, model="fraud", version="3", until=at("2026-12-01T12"))) == 150
    storage = {"ModelStorage": azurite_connection, "PREDICTION_LOG_CONTAINER": container.container_name}
    shown = cli("--blob", "--version", "3", "--since", "2026-12-01T12", env=storage)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("records            20  (2026-12-01T12:15:00.000Z")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "shared.stores.prediction_log", *args]
    environ = {**os.environ, **(env or {})}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, env=environ)


def test_the_command_prints_a_summary_or_the_records(directory: Path) -> None:
    shown = cli("--dir", str(directory), "--since", "2026-12-01T11", "--model", "fraud")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("records            70  (2026-12-01T11:15:00.000Z")
    assert "by version         fraud/3 70" in shown.stdout
    dumped = cli("--dir", str(directory), "--version", "4", "--jsonl")
    assert [orjson.loads(line)["version"] for line in dumped.stdout.splitlines()] == ["4"] * 30


@pytest.mark.skipif(not HAS_PANDAS, reason="pandas is not installed (it is not a runtime dependency)")
def test_a_range_loads_as_a_dataframe_with_its_features_as_columns(directory: Path) -> None:
    frame = reader.to_pandas(directory, version="4")
    assert len(frame) == 30 and "features.amount" in frame.columns


@pytest.mark.skipif(HAS_PANDAS, reason="pandas is installed here")
def test_without_pandas_the_dataframe_asked_for_is_a_clear_error(directory: Path) -> None:
    with pytest.raises(ImportError, match="pip install pandas"):
        reader.to_pandas(directory)
    shown = cli("--dir", str(directory), "--pandas")
    assert shown.returncode == 2 and "not a runtime dependency" in shown.stderr


async def test_a_pending_decisions_outcome_written_past_the_range_is_read_with_it(tmp_path: Path) -> None:
    """A decision at 10:59:58 whose review ended at 11:00:03 lands in hour 11's object: a range
    ending at 11:00 still joins its outcome; outcomes past the look-past, or of decisions outside
    the range, stay out; with every outcome found, later hours are not opened."""
    from shared.domain.answers import Review

    def pending(i: int, at: float) -> DecisionRecord:
        record = decision(i, at=at - (i % 600) / 10)  # NOTE: `decision` spreads records over the hour: undone
        record.review = Review("pending", f"evt-{i}")
        return record

    def outcome(i: int, at: float) -> DecisionRecord:
        record = decision(i, at=at - (i % 600) / 10)
        record.via, record.review, record.decision = "review", Review("done", f"evt-{i}", risk_score=0.9), "decline"
        return record

    eleven = HOUR_10 + 45 * 60  # 11:00:00
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(pending(1, eleven - 2))  # its outcome 5 s later, past the range
    log.add(pending(2, eleven - 1))  # its outcome past the look-past
    log.add(outcome(1, eleven + 3))
    log.add(outcome(3, eleven + 4))  # the outcome of a decision the range does not hold
    log.add(outcome(2, eleven + 3600 + 90))
    await log.aclose()
    records = reader.load(tmp_path, since=at("2026-12-01T10"), until=at("2026-12-01T11"))
    assert sorted((r["via"], r["event"]) for r in records) == sorted(
        [("http", hashed_id("evt-1")), ("http", hashed_id("evt-2")), ("review", hashed_id("evt-1"))]
    )
    rows = {r["event"]: r for r in reader.joined(records)}
    assert rows[hashed_id("evt-1")]["outcome"]["status"] == "done"
    assert rows[hashed_id("evt-1")]["outcome"]["decision"] == "decline"
    assert "outcome" not in rows[hashed_id("evt-2")]
    assert reader.summarize(records).outcomes == {"done": 1}
    assert len(reader.load(tmp_path, until=at("2026-12-01T12:30"))) == 5  # NOTE: nothing owed twice
