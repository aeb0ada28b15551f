"""The log: sampled, bounded, off the response path; records land, are retried, or are counted as dropped."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

from shared.domain.answers import ReasonCode
from shared.domain.records import DecisionRecord, encode_records, hashed_id
from shared.errors import SinkError
from shared.settings import PredictionLogPolicy
from shared.stores.prediction_log import log as log_module
from shared.stores.prediction_log.log import CHUNK, HAND_OVER, PredictionLog
from shared.stores.prediction_log.sinks import BlobSink, DirectorySink, Partition
from shared.telemetry import metrics
from tests.faults.proxy import Proxy
from tests.stores.prediction_log import HOUR_10, balanced, decision, eventually, lines_of

POLICY = PredictionLogPolicy(sink="dir", flush_s=0.05)
FILE = "model=fraud/version=3/date=2026-12-01/hour=10/r1.jsonl"


Start = Callable[[PredictionLog], None]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    """`start(log)` runs the log's writer; after the test it is cancelled and the log closed, as the core does."""
    started: list[tuple[PredictionLog, asyncio.Task[None]]] = []

    def run(log: PredictionLog) -> None:
        started.append((log, asyncio.get_running_loop().create_task(log.run())))

    yield run
    for log, writer in started:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
        await log.aclose()


def blocked(tmp_path: Path) -> tuple[Path, Path]:
    """A log directory that cannot be made (a file holds its parent's name) and that file."""
    blocker = tmp_path / "disk"
    blocker.write_text("not a directory")
    return blocker / "predictions", blocker


async def test_records_land_in_one_file_per_model_version_and_hour(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    records = [decision(i) for i in range(10)] + [decision(i, version="4") for i in range(5)]
    records += [decision(i, at=HOUR_10 + 3600) for i in range(3)]
    for record in records:
        log.add(record)
    await log.flush()

    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.jsonl"))
    assert files == [
        FILE,
        "model=fraud/version=3/date=2026-12-01/hour=11/r1.jsonl",
        "model=fraud/version=4/date=2026-12-01/hour=10/r1.jsonl",
    ]
    written = lines_of(tmp_path / FILE)
    assert [line["score"] for line in written] == [r.score for r in records[:10]]
    assert written[0]["features"]["amount"] == pytest.approx(120.5)
    assert written[0]["at"].startswith("2026-12-01T10:15:00")
    assert log.stats().written == 18 and log.stats().flushes == 1 and balanced(log.stats())


@pytest.mark.parametrize("key", [None, "chargebacks-2026"])
async def test_event_ids_are_written_hashed_never_raw(tmp_path: Path, key: str | None) -> None:
    log = PredictionLog(replace(POLICY, hash_key=key), DirectorySink(tmp_path, "r1"), replica="r1")
    for i in range(50):
        log.add(decision(i))
    await log.flush()

    data = (tmp_path / FILE).read_bytes()
    assert b"evt-" not in data
    events = [line["event"] for line in lines_of(tmp_path / FILE)]
    assert events == [hashed_id(f"evt-{i}", (key or "").encode()) for i in range(50)]
    assert events[0] != hashed_id("evt-0", b"another key")


@pytest.mark.parametrize("sample", [0.1, 0.5])
def test_the_share_sampled_is_close_to_its_setting(sample: float) -> None:
    log = PredictionLog(replace(POLICY, sample=sample), None, replica="r1")
    kept = sum(log.wants() for _ in range(200_000))
    assert kept / 200_000 == pytest.approx(sample, abs=0.005)


def test_every_decision_is_kept_at_sample_one_without_a_random_draw() -> None:
    log = PredictionLog(POLICY, None, replica="r1")
    state = random.getstate()
    assert all(log.wants() for _ in range(10_000))
    assert random.getstate() == state  # NOTE: not one draw from the generator
    assert not any(PredictionLog(replace(POLICY, sample=0.0), None, replica="r1").wants() for _ in range(10_000))


async def test_add_never_waits_while_the_sink_fails_and_every_record_lands_when_it_returns(
    tmp_path: Path, start: Start
) -> None:
    root, blocker = blocked(tmp_path)
    log = PredictionLog(POLICY, DirectorySink(root, "r1"), replica="r1")
    start(log)
    slowest = 0.0
    for i in range(2000):
        record = decision(i)
        began = time.perf_counter()
        log.add(record)
        slowest = max(slowest, time.perf_counter() - began)
        if i % 100 == 0:
            await asyncio.sleep(0.01)  # NOTE: the writer runs (and fails) meanwhile
    await eventually(lambda: log.stats().failures >= 2, what="a failed write")
    assert slowest < 0.02  # NOTE: a few µs each; the bound leaves room for a noisy machine, not for a wait
    assert log.stats().buffered == 2000 and log.stats().written == 0
    problem = log.problem()
    assert problem is not None and problem.startswith("predictions: the dir sink has failed for")
    assert "NotADirectoryError" in problem and "2,000 records held, 0 dropped" in problem

    blocker.unlink()
    await eventually(lambda: log.stats().written == 2000, what="the retried records")
    assert [line["event"] for line in lines_of(root / FILE)] == [hashed_id(f"evt-{i}") for i in range(2000)]
    assert log.problem() is None and log.stats().buffered == 0 and balanced(log.stats())


async def test_with_the_buffer_full_the_drop_count_is_exactly_what_the_sink_lacks(tmp_path: Path) -> None:
    root, blocker = blocked(tmp_path)
    log = PredictionLog(replace(POLICY, buffer=100), DirectorySink(root, "r1"), replica="r1")
    before = metrics.PREDICTION_RECORDS.values.get(("dropped_full",), 0)
    for i in range(60):
        log.add(decision(i))
    await log.flush()  # NOTE: encoded and kept pending: they still count against the buffer
    for i in range(60, 250):
        log.add(decision(i))
    stats = log.stats()
    assert (stats.buffered, stats.dropped_full, stats.failures) == (100, 150, 1)
    assert metrics.PREDICTION_RECORDS.values[("dropped_full",)] - before == 150
    assert "150 dropped" in (log.problem() or "")

    blocker.unlink()
    await asyncio.sleep(POLICY.flush_s)  # NOTE: the first retry waits flush_s
    await log.flush()
    kept = [line["event"] for line in lines_of(root / FILE)]
    assert kept == [hashed_id(f"evt-{i}") for i in range(100)]
    assert len(kept) == stats.recorded - stats.dropped_full and balanced(log.stats())


async def test_shutdown_writes_what_is_held(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    for i in range(1000):
        log.add(decision(i))
    await log.aclose()
    assert len(lines_of(tmp_path / FILE)) == 1000
    assert (log.stats().written, log.stats().dropped_shutdown) == (1000, 0)


async def test_a_writer_cancelled_between_chunks_loses_no_record_and_writes_none_twice(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    count = 8 * HAND_OVER
    for i in range(count):
        log.add(decision(i))
    writer = asyncio.get_running_loop().create_task(log.flush())
    # NOTE: cancelled at one of its pauses, with a batch handed over and only part of it encoded
    await eventually(lambda: 0 < len(log._records) < count - HAND_OVER, what="the writer took two batches")
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    await log.aclose()  # NOTE: as the core shuts down: the writer cancelled, then what is held sent
    events = [line["event"] for line in lines_of(tmp_path / FILE)]
    assert sorted(events) == sorted(hashed_id(f"evt-{i}") for i in range(count))
    assert log.stats().written == count and balanced(log.stats())


async def test_an_awaitable_subscriber_is_awaited_before_the_batch_is_encoded(tmp_path: Path) -> None:
    """Reason codes answer an awaitable (their model run in a worker thread): what it fills is in the lines."""
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")

    async def explain(batch: Sequence[DecisionRecord]) -> None:
        await asyncio.sleep(0.01)  # NOTE: as a worker thread's run: the loop turns meanwhile
        for record in batch:
            record.reasons = [ReasonCode("amount", float(record.row[0]), 80.0, 0.4)]

    log.on("batch", explain)
    for i in range(HAND_OVER + 10):
        log.add(decision(i))
    await log.flush()
    assert all(line["reasons"] for line in lines_of(tmp_path / FILE))
    assert log.stats().written == HAND_OVER + 10 and balanced(log.stats())
    await log.aclose()


async def test_a_writer_cancelled_while_a_subscriber_runs_loses_no_record(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    started = asyncio.Event()

    async def slow(batch: Sequence[DecisionRecord]) -> None:
        started.set()
        await asyncio.sleep(60)

    log.on("batch", slow)
    count = 3 * HAND_OVER
    for i in range(count):
        log.add(decision(i))
    writer = asyncio.get_running_loop().create_task(log.flush())
    await asyncio.wait_for(started.wait(), 5)  # NOTE: the first batch taken, in the subscriber's hands
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    log._subscribers.clear()  # NOTE: shutdown's drain would meet the same subscriber
    await log.aclose()
    events = [line["event"] for line in lines_of(tmp_path / FILE)]
    assert sorted(events) == sorted(hashed_id(f"evt-{i}") for i in range(count))
    assert log.stats().written == count and balanced(log.stats())


async def test_shutdown_gives_up_after_close_s_and_counts_what_it_could_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_module, "CLOSE_S", 0.3)
    root, _ = blocked(tmp_path)
    log = PredictionLog(POLICY, DirectorySink(root, "r1"), replica="r1")
    for i in range(500):
        log.add(decision(i))
    began = time.monotonic()
    await log.aclose()
    assert 0.3 <= time.monotonic() - began < 1.5
    log.add(decision(500))  # NOTE: after close: counted, never held
    stats = log.stats()
    assert (stats.written, stats.dropped_shutdown, stats.buffered, stats.recorded) == (0, 501, 0, 501)
    assert balanced(stats) and not root.exists()


async def test_a_writer_cancelled_mid_write_lets_it_finish_and_shutdown_writes_nothing_twice(tmp_path: Path) -> None:
    log = PredictionLog(replace(POLICY, buffer=100_000), DirectorySink(tmp_path, "r1"), replica="r1")
    for i in range(60_000):  # NOTE: ~40 MB in one write: long enough to be cancelled in the middle
        log.add(decision(i))
    writer = asyncio.get_running_loop().create_task(log.run())
    while not (tmp_path / FILE).exists():  # NOTE: polled without a pause: the write lasts a few ms
        await asyncio.sleep(0)
    assert log.stats().written == 0  # NOTE: the write is in flight
    writer.cancel()  # NOTE: as the core's Background does at shutdown
    await asyncio.gather(writer, return_exceptions=True)
    await log.aclose()
    assert len(lines_of(tmp_path / FILE)) == 60_000 == log.stats().written
    assert log.stats().dropped_shutdown == 0


async def test_a_subscriber_sees_each_record_before_it_is_encoded_and_one_that_raises_stops_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    seen: list[DecisionRecord] = []

    def broken(batch: Sequence[DecisionRecord]) -> None:
        raise RuntimeError("a drift bug")

    def explain(batch: Sequence[DecisionRecord]) -> None:
        seen.extend(batch)
        for record in batch:
            record.reasons = [ReasonCode("amount", float(record.row[0]), 80.0, 0.4)]

    log.on("batch", broken)
    log.on("batch", explain)
    for i in range(600):
        log.add(decision(i))
    await log.flush()
    for i in range(600, 700):
        log.add(decision(i))
    await log.flush()

    assert len(seen) == 700 and log.stats().written == 700
    written = lines_of(tmp_path / FILE)
    assert written[0]["reasons"] == [{"feature": "amount", "value": 120.5, "default": 80.0, "contribution": 0.4}]
    assert sum("subscriber" in r.message for r in caplog.records) == 1  # NOTE: logged once, not per batch


async def test_with_no_sink_records_go_to_the_subscribers_only() -> None:
    log = PredictionLog(POLICY, None, replica="r1")
    seen: list[DecisionRecord] = []
    log.on("batch", seen.extend)
    for i in range(300):
        log.add(decision(i))
    await log.flush()
    assert len(seen) == 300
    assert log.stats().sink == "none" and log.stats().written == 300 and balanced(log.stats())
    await log.aclose()


async def test_the_writer_wakes_before_flush_s_when_many_records_are_held(tmp_path: Path, start: Start) -> None:
    log = PredictionLog(replace(POLICY, flush_s=60.0, buffer=400), DirectorySink(tmp_path, "r1"), replica="r1")
    start(log)
    await asyncio.sleep(0.05)
    for i in range(200):  # NOTE: half the buffer wakes it
        log.add(decision(i))
    await eventually(lambda: log.stats().written == 200, within_s=2.0, what="an early flush")


async def test_a_record_that_cannot_be_encoded_is_dropped_and_counted_and_the_rest_land(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(0))
    log.add(decision(1, columns=("amount",)))  # NOTE: one column named for a row of six
    log.add(decision(2))
    await log.flush()
    assert [line["event"] for line in lines_of(tmp_path / FILE)] == [hashed_id("evt-0"), hashed_id("evt-2")]
    assert (log.stats().written, log.stats().dropped_sink) == (2, 1) and balanced(log.stats())
    assert (log.problem() or "").startswith("predictions: records dropped")


async def test_a_partition_no_path_can_name_is_refused_for_good_and_the_others_land(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    for i in range(5):
        log.add(decision(i, model="../fraud"))
        log.add(decision(i))
    await log.flush()
    assert len(lines_of(tmp_path / FILE)) == 5
    assert (log.stats().written, log.stats().dropped_sink, log.stats().buffered) == (5, 5, 0)
    assert log.stats().failures == 0 and balanced(log.stats())


class LosesAnAnswer:
    """A real directory sink whose first write lands its first half, then fails as a lost answer would."""

    name = "dir"
    write_bytes = DirectorySink.write_bytes

    def __init__(self, sink: DirectorySink) -> None:
        self.sink = sink
        self.failed = False

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        if self.failed:
            return await self.sink.write(partition, lines, count)
        self.failed = True
        half = lines.index(b"\n", len(lines) // 2) + 1
        await self.sink.write(partition, lines[:half], lines.count(b"\n", 0, half))
        raise SinkError("the connection reset after the first block", landed=half)

    async def aclose(self) -> None:
        await self.sink.aclose()


class Recorded(DirectorySink):
    """A real directory sink that keeps the size of each write it was given."""

    def __init__(self, root: Path, replica: str) -> None:
        super().__init__(root, replica)
        self.sizes: list[int] = []

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        self.sizes.append(len(lines))
        await super().write(partition, lines, count)


async def test_a_partition_s_lines_go_in_writes_of_at_most_write_bytes_all_of_them_in_one_flush(
    tmp_path: Path,
) -> None:
    sink = Recorded(tmp_path, "r1")
    log = PredictionLog(POLICY, sink, replica="r1")  # NOTE: CHUNK records' lines a piece
    piece = len(encode_records([decision(i) for i in range(CHUNK)]))
    sink.write_bytes = int(2.5 * piece)  # NOTE: two pieces a write, not three
    for i in range(10 * CHUNK):
        log.add(decision(i))
    await log.flush()
    assert log.stats().written == 10 * CHUNK and balanced(log.stats())
    assert [line["event"] for line in lines_of(tmp_path / FILE)] == [hashed_id(f"evt-{i}") for i in range(10 * CHUNK)]
    assert len(sink.sizes) == 5 and all(size <= sink.write_bytes for size in sink.sizes)


async def test_what_landed_of_a_failed_write_is_counted_written_and_never_sent_again(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, LosesAnAnswer(DirectorySink(tmp_path, "r1")), replica="r1")
    for i in range(101):
        log.add(decision(i))
    await log.flush()
    assert 0 < log.stats().written < 101 and log.stats().failures == 1 and balanced(log.stats())
    await asyncio.sleep(POLICY.flush_s)
    await log.flush()
    assert [line["event"] for line in lines_of(tmp_path / FILE)] == [hashed_id(f"evt-{i}") for i in range(101)]
    assert log.stats().written == 101 and balanced(log.stats())


# -- through Azurite ------------------------------------------------------------------------------


@pytest.fixture
def azurite(azurite_connection: str) -> Iterator[tuple[str, str, BlobServiceClient]]:
    """(connection string, a container name of the test's own, a direct client); the container goes after."""
    service = BlobServiceClient.from_connection_string(azurite_connection)
    container = f"predlog-{uuid.uuid4().hex[:12]}"
    yield azurite_connection, container, service
    with contextlib.suppress(ResourceNotFoundError):
        service.delete_container(container)


def endpoint(connection: str) -> str:
    return connection.split("BlobEndpoint=")[1].split(";")[0]


def azurite_port(connection: str) -> int:
    return urlsplit(endpoint(connection)).port or 80


def through(proxy: Proxy, connection: str) -> str:
    """The connection string, with Azurite reached through `proxy`."""
    direct = endpoint(connection)
    return connection.replace(direct, direct.replace(f":{azurite_port(connection)}/", f":{proxy.port}/"))


def blob_lines(service: BlobServiceClient, container: str) -> list[bytes]:
    blob = service.get_blob_client(container, FILE)
    return blob.download_blob().readall().splitlines()


async def test_with_storage_unreachable_records_wait_in_memory_and_land_once_it_returns(
    azurite: tuple[str, str, BlobServiceClient], start: Start
) -> None:
    connection, container, service = azurite
    with Proxy(("127.0.0.1", azurite_port(connection))) as proxy:
        proxy.mode("reset")
        sink = BlobSink.connect(
            container=container, connection_string=through(proxy, connection), blob_uri=None, replica="r1"
        )
        log = PredictionLog(replace(POLICY, sink="blob"), sink, replica="r1")
        start(log)
        for i in range(3000):
            log.add(decision(i))
        await eventually(lambda: log.stats().failures >= 2, what="failed writes")
        assert log.stats().buffered == 3000
        assert "the blob sink has failed" in (log.problem() or "")

        proxy.mode("pass")
        await eventually(lambda: log.stats().written == 3000, what="the records after the outage")
        assert len(blob_lines(service, container)) == 3000
        assert log.problem() is None and balanced(log.stats())


async def test_a_reviews_rationale_is_never_written_and_the_rest_of_the_review_is(tmp_path: Path) -> None:
    """The reviewer's prose may quote the payment's note: the immutable log keeps its outcome only."""
    from shared.domain.answers import Review

    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    reviewed = decision(1)
    reviewed.review = Review("done", "evt-1", risk_score=0.91, rationale='note says "wire it to my cousin Ada"')
    log.add(reviewed)
    outcome = decision(2)
    outcome.review = Review("done", "evt-2", risk_score=0.4, rationale="the user wrote: Ada Lovelace, 12 Elm St")
    log.add_outcome(outcome)
    await log.flush()
    data = (tmp_path / FILE).read_bytes()
    assert b"Ada" not in data and b"rationale" not in data
    reviews = [line["review"] for line in lines_of(tmp_path / FILE)]
    assert [(r["status"], r["risk_score"]) for r in reviews] == [("done", 0.91), ("done", 0.4)]
