"""The sinks: one object per replica per hour, appended whole or not at all, retries never doubled."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobProperties, BlobServiceClient, BlobType

from shared.errors import SinkError
from shared.settings import PredictionLogPolicy, Settings
from shared.stores.prediction_log.sinks import (
    BlobSink,
    DirectorySink,
    Partition,
    object_name,
    sink_from_settings,
)
from tests.faults.proxy import Proxy

HOUR: Partition = ("fraud", "3", "2026-12-01T10")
NAME = "model=fraud/version=3/date=2026-12-01/hour=10/r1.jsonl"


def lines(start: int, count: int, width: int = 60) -> bytes:
    """`count` JSON lines of about `width` bytes each, numbered from `start`."""
    return b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * width) for n in range(start, start + count))


# -- names ----------------------------------------------------------------------------------------


def test_an_object_is_named_by_model_version_date_hour_and_replica() -> None:
    assert object_name(HOUR, "r1") == NAME
    assert object_name(HOUR, "r1", segment=2) == NAME.replace("r1.jsonl", "r1.2.jsonl")


@pytest.mark.parametrize(
    "partition", [("../fraud", "3", "2026-12-01T10"), ("fraud", "3/4", "2026-12-01T10"), ("fraud", "3", "today")]
)
def test_a_partition_no_path_can_hold_is_refused_for_good(partition: Partition) -> None:
    with pytest.raises(SinkError) as refused:
        object_name(partition, "r1")
    assert refused.value.permanent


def on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.jsonl"))


async def test_the_local_log_stays_under_its_cap_and_keeps_the_newest_records(tmp_path: Path) -> None:
    cap = 64 << 10
    sink = DirectorySink(tmp_path, "r1", max_bytes=cap)
    hours = [("fraud", "3", f"2026-12-01T{h:02d}") for h in (10, 11, 12)]
    for i in range(300):  # ~27 KB an hour-partition ... ~27 MB in all without the cap
        await sink.write(hours[i * 3 // 300], lines(i * 10, 10), 10)
    assert on_disk(tmp_path) <= cap and sink.removed_bytes > 0
    newest = b"".join(p.read_bytes() for p in sorted(tmp_path.rglob("hour=12/*.jsonl")))
    assert lines(2990, 10) in newest  # the last write is there
    assert not list(tmp_path.rglob("hour=10/*.jsonl"))  # the oldest hour went first
    assert len(list(tmp_path.rglob("hour=12/r1*.jsonl"))) > 1  # an hour rolls to segments: it can shrink too


async def test_a_restarted_writer_counts_what_it_left_against_the_cap(tmp_path: Path) -> None:
    first = DirectorySink(tmp_path, "r1", max_bytes=1 << 20)
    for i in range(100):
        await first.write(HOUR, lines(i * 100, 100), 100)
    left = on_disk(tmp_path)
    assert left > 64 << 10
    again = DirectorySink(tmp_path, "r1", max_bytes=64 << 10)
    await again.write(("fraud", "3", "2026-12-01T11"), lines(0, 10), 10)
    assert on_disk(tmp_path) <= 64 << 10 and again.removed_bytes > 0
    other = DirectorySink(tmp_path, "r2", max_bytes=8 << 10)  # another process beside it: its own files only
    await other.write(HOUR, lines(0, 10), 10)
    assert on_disk(tmp_path) > 8 << 10


def test_a_replica_name_must_be_a_plain_file_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replica"):
        DirectorySink(tmp_path, "../r1")


async def test_the_settings_choose_the_sink(tmp_path: Path) -> None:
    assert sink_from_settings(Settings(), "r1") is None
    chosen = sink_from_settings(Settings(prediction_log=PredictionLogPolicy(sink="dir", directory=str(tmp_path))), "r1")
    assert isinstance(chosen, DirectorySink) and chosen.root == tmp_path
    blob = PredictionLogPolicy(sink="blob")
    for storage in (
        Settings(model_storage="UseDevelopmentStorage=true", prediction_log=blob),
        Settings(model_storage_blob_uri="https://account.blob.core.windows.net", prediction_log=blob),
    ):
        sink = sink_from_settings(storage, "r1")
        assert isinstance(sink, BlobSink)
        await sink.aclose()


# -- the directory -----------------------------------------------------------------------------------


async def test_a_directory_sink_appends_to_its_replicas_file_of_the_hour(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path, "r1")
    await sink.write(HOUR, lines(0, 3), 3)
    await sink.write(HOUR, lines(3, 2), 2)
    await DirectorySink(tmp_path, "r2").write(HOUR, lines(5, 1), 1)
    assert (tmp_path / NAME).read_bytes() == lines(0, 5)
    assert (tmp_path / NAME.replace("r1", "r2")).read_bytes() == lines(5, 1)


async def test_an_append_the_disk_refuses_halfway_is_taken_back_whole(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path, "r1")
    await sink.write(HOUR, lines(0, 10), 10)
    size = (tmp_path / NAME).stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # NOTE: else the process is killed, not refused
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, hard))  # NOTE: room for a dozen lines, not 100
    try:
        with pytest.raises(SinkError, match="File too large") as refused:
            await sink.write(HOUR, lines(10, 100), 100)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert not refused.value.permanent and refused.value.landed == 0
    assert (tmp_path / NAME).read_bytes() == lines(0, 10)  # NOTE: no half line, no part of the write


# -- append blobs in Azurite --------------------------------------------------------------------------


class Blobs:
    """A container of the test's own in Azurite: sinks that write to it, and what its blobs hold."""

    def __init__(self, connection: str) -> None:
        self.connection = connection
        self.service = BlobServiceClient.from_connection_string(connection)
        self.container = f"predlog-{uuid.uuid4().hex[:12]}"
        self.sinks: list[BlobSink] = []

    def sink(self, connection: str | None = None, **options: Any) -> BlobSink:
        """A sink of replica r1 (unless `replica=`) into the container, through `connection` if given."""
        options.setdefault("replica", "r1")
        made = BlobSink.connect(
            container=self.container, connection_string=connection or self.connection, blob_uri=None, **options
        )
        self.sinks.append(made)
        return made

    def content(self, name: str = NAME) -> bytes:
        return self.service.get_blob_client(self.container, name).download_blob().readall()

    def properties(self, name: str = NAME) -> BlobProperties:
        return self.service.get_blob_client(self.container, name).get_blob_properties()


@pytest.fixture
async def blobs(azurite_connection: str) -> AsyncIterator[Blobs]:
    made = Blobs(azurite_connection)
    yield made
    for sink in made.sinks:
        await sink.aclose()
    with contextlib.suppress(ResourceNotFoundError):
        made.service.delete_container(made.container)


async def test_a_blob_sink_makes_its_container_and_append_blob_and_appends_to_it(
    blobs: Blobs,
) -> None:
    sink = blobs.sink()
    await sink.write(HOUR, lines(0, 3), 3)
    await sink.write(HOUR, lines(3, 2), 2)
    assert blobs.content() == lines(0, 5)
    props = blobs.properties()
    assert props.blob_type == BlobType.APPENDBLOB and props.content_settings.content_type == "application/x-ndjson"


async def test_a_restarted_replica_appends_after_what_its_blob_holds(blobs: Blobs) -> None:
    await blobs.sink().write(HOUR, lines(0, 3), 3)
    await blobs.sink().write(HOUR, lines(3, 3), 3)
    assert blobs.content() == lines(0, 6)


async def test_a_large_write_goes_in_blocks_of_whole_lines(blobs: Blobs) -> None:
    sink = blobs.sink(block_bytes=1024)
    await sink.write(HOUR, lines(0, 100), 100)  # NOTE: ~8 KB: at least 8 blocks
    assert blobs.content() == lines(0, 100)
    props = blobs.properties()
    assert (props.append_blob_committed_block_count or 0) >= 8


async def test_a_full_blob_rolls_over_to_the_next_segment_of_the_hour(blobs: Blobs) -> None:
    sink = blobs.sink(max_blocks=2)
    for n in range(5):
        await sink.write(HOUR, lines(n, 1), 1)
    assert blobs.content() == lines(0, 2)
    assert blobs.content(NAME.replace("r1.jsonl", "r1.1.jsonl")) == lines(2, 2)
    assert blobs.content(NAME.replace("r1.jsonl", "r1.2.jsonl")) == lines(4, 1)
    await blobs.sink(max_blocks=2).write(HOUR, lines(5, 1), 1)  # NOTE: a restart finds the segment with room
    assert blobs.content(NAME.replace("r1.jsonl", "r1.2.jsonl")) == lines(4, 2)


async def test_a_retried_append_that_had_landed_is_not_written_twice(
    blobs: Blobs, azurite_connection: str, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = azurite_connection.split("BlobEndpoint=")[1].split(";")[0]
    port = urlsplit(endpoint).port
    assert port is not None
    with Proxy(("127.0.0.1", port)) as proxy:
        sink = blobs.sink(azurite_connection.replace(f":{port}/", f":{proxy.port}/"), timeout_s=0.3)
        await sink.write(HOUR, lines(0, 5), 5)
        proxy.mode("delay", delay_s=1.0)  # NOTE: the append reaches storage; its answer comes too late
        with pytest.raises(SinkError, match="TimeoutError") as lost:
            await sink.write(HOUR, lines(5, 5), 5)
        assert lost.value.landed == 0 and not lost.value.permanent
        for _ in range(100):
            if blobs.content() == lines(0, 10):
                break
            await asyncio.sleep(0.05)
        assert blobs.content() == lines(0, 10)  # NOTE: it had landed all the same

        proxy.mode("pass")
        await sink.write(HOUR, lines(5, 5) + lines(10, 5), 10)  # NOTE: the retry, with what came since
    assert blobs.content() == lines(0, 15)
    assert "did not write" not in caplog.text


async def test_lines_another_writer_appended_are_kept_and_ours_follow_them(
    blobs: Blobs, caplog: pytest.LogCaptureFixture
) -> None:
    ours, intruder = blobs.sink(), blobs.sink()  # NOTE: the same replica name twice: a misconfiguration
    await ours.write(HOUR, lines(0, 2), 2)
    await intruder.write(HOUR, lines(100, 2), 2)
    await ours.write(HOUR, lines(2, 2), 2)
    assert blobs.content() == lines(0, 2) + lines(100, 2) + lines(2, 2)
    assert "grew by" in caplog.text


async def test_a_container_removed_meanwhile_is_made_again(blobs: Blobs) -> None:
    sink = blobs.sink()
    await sink.write(HOUR, lines(0, 2), 2)
    blobs.service.delete_container(blobs.container)
    for _ in range(50):  # NOTE: Azurite lets a deleted container's name go after a moment
        try:
            await sink.write(HOUR, lines(2, 2), 2)
            break
        except SinkError as exc:
            assert not exc.permanent
            await asyncio.sleep(0.1)
    assert blobs.content() == lines(2, 2)


async def test_a_request_storage_refuses_for_good_is_a_permanent_failure(azurite_connection: str) -> None:
    sink = BlobSink.connect(container="Not_A_Name", connection_string=azurite_connection, blob_uri=None, replica="r1")
    try:
        with pytest.raises(SinkError, match="400") as refused:
            await sink.write(HOUR, lines(0, 1), 1)
        assert refused.value.permanent
    finally:
        await sink.aclose()


async def test_storage_out_of_reach_is_a_failure_to_retry(unreachable: str) -> None:
    sink = BlobSink.connect(container="predlog-none", connection_string=unreachable, blob_uri=None, replica="r1")
    try:
        with pytest.raises(SinkError) as failed:
            await sink.write(HOUR, lines(0, 1), 1)
        assert not failed.value.permanent and failed.value.landed == 0
    finally:
        await sink.aclose()


@pytest.fixture
def unreachable(azurite_connection: str) -> str:
    """Azurite's connection string, pointed at a loopback port where nothing listens."""
    from tests.conftest import closed_port

    port = urlsplit(azurite_connection.split("BlobEndpoint=")[1].split(";")[0]).port
    return azurite_connection.replace(f":{port}/", f":{closed_port()}/")
