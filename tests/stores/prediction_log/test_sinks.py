"""The sinks: one object per replica per hour, appended whole or not at all, retries never doubled."""

from __future__ import annotations

import asyncio
import resource
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from azure.storage.blob import BlobServiceClient, BlobType

from shared.settings import PredictionLogPolicy, Settings
from shared.stores.prediction_log.sinks import (
    BlobSink,
    DirectorySink,
    Partition,
    SinkError,
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


Connect = Callable[..., BlobSink]


@pytest.fixture
async def blobs(azurite_connection: str) -> AsyncIterator[tuple[Connect, BlobServiceClient]]:
    """(`connect(**options)`: a sink in a container of its own, closed after the test; a direct client)."""
    service = BlobServiceClient.from_connection_string(azurite_connection)
    made: list[BlobSink] = []

    def connect(connection: str = azurite_connection, **options: Any) -> BlobSink:
        options.setdefault("replica", "r1")
        sink = BlobSink.connect(container="predlog-sinks", connection_string=connection, blob_uri=None, **options)
        made.append(sink)
        return sink

    yield connect, service
    for sink in made:
        await sink.aclose()
    for container in service.list_containers(name_starts_with="predlog-"):
        service.delete_container(container.name)


def content(service: BlobServiceClient, name: str = NAME) -> bytes:
    return service.get_blob_client("predlog-sinks", name).download_blob().readall()


async def test_a_blob_sink_makes_its_container_and_append_blob_and_appends_to_it(
    blobs: tuple[Connect, BlobServiceClient],
) -> None:
    connect, service = blobs
    sink = connect()
    await sink.write(HOUR, lines(0, 3), 3)
    await sink.write(HOUR, lines(3, 2), 2)
    assert content(service) == lines(0, 5)
    props = service.get_blob_client("predlog-sinks", NAME).get_blob_properties()
    assert props.blob_type == BlobType.APPENDBLOB and props.content_settings.content_type == "application/x-ndjson"


async def test_a_restarted_replica_appends_after_what_its_blob_holds(blobs: tuple[Connect, BlobServiceClient]) -> None:
    connect, service = blobs
    await connect().write(HOUR, lines(0, 3), 3)
    await connect().write(HOUR, lines(3, 3), 3)
    assert content(service) == lines(0, 6)


async def test_a_large_write_goes_in_blocks_of_whole_lines(blobs: tuple[Connect, BlobServiceClient]) -> None:
    connect, service = blobs
    sink = connect(block_bytes=1024)
    await sink.write(HOUR, lines(0, 100), 100)  # NOTE: ~8 KB: at least 8 blocks
    assert content(service) == lines(0, 100)
    props = service.get_blob_client("predlog-sinks", NAME).get_blob_properties()
    assert (props.append_blob_committed_block_count or 0) >= 8


async def test_a_full_blob_rolls_over_to_the_next_segment_of_the_hour(blobs: tuple[Connect, BlobServiceClient]) -> None:
    connect, service = blobs
    sink = connect(max_blocks=2)
    for n in range(5):
        await sink.write(HOUR, lines(n, 1), 1)
    assert content(service) == lines(0, 2)
    assert content(service, NAME.replace("r1.jsonl", "r1.1.jsonl")) == lines(2, 2)
    assert content(service, NAME.replace("r1.jsonl", "r1.2.jsonl")) == lines(4, 1)
    await connect(max_blocks=2).write(HOUR, lines(5, 1), 1)  # NOTE: a restart finds the segment with room
    assert content(service, NAME.replace("r1.jsonl", "r1.2.jsonl")) == lines(4, 2)


async def test_a_retried_append_that_had_landed_is_not_written_twice(
    blobs: tuple[Connect, BlobServiceClient], azurite_connection: str, caplog: pytest.LogCaptureFixture
) -> None:
    connect, service = blobs
    endpoint = azurite_connection.split("BlobEndpoint=")[1].split(";")[0]
    port = urlsplit(endpoint).port
    assert port is not None
    with Proxy(("127.0.0.1", port)) as proxy:
        sink = connect(azurite_connection.replace(f":{port}/", f":{proxy.port}/"), timeout_s=0.3)
        await sink.write(HOUR, lines(0, 5), 5)
        proxy.mode("delay", delay_s=1.0)  # NOTE: the append reaches storage; its answer comes too late
        with pytest.raises(SinkError, match="TimeoutError") as lost:
            await sink.write(HOUR, lines(5, 5), 5)
        assert lost.value.landed == 0 and not lost.value.permanent
        for _ in range(100):
            if content(service) == lines(0, 10):
                break
            await asyncio.sleep(0.05)
        assert content(service) == lines(0, 10)  # NOTE: it had landed all the same

        proxy.mode("pass")
        await sink.write(HOUR, lines(5, 5) + lines(10, 5), 10)  # NOTE: the retry, with what came since
    assert content(service) == lines(0, 15)
    assert "did not write" not in caplog.text


async def test_lines_another_writer_appended_are_kept_and_ours_follow_them(
    blobs: tuple[Connect, BlobServiceClient], caplog: pytest.LogCaptureFixture
) -> None:
    connect, service = blobs
    ours, intruder = connect(), connect()  # NOTE: the same replica name twice: a misconfiguration
    await ours.write(HOUR, lines(0, 2), 2)
    await intruder.write(HOUR, lines(100, 2), 2)
    await ours.write(HOUR, lines(2, 2), 2)
    assert content(service) == lines(0, 2) + lines(100, 2) + lines(2, 2)
    assert "grew by" in caplog.text


async def test_a_container_removed_meanwhile_is_made_again(blobs: tuple[Connect, BlobServiceClient]) -> None:
    connect, service = blobs
    sink = connect()
    await sink.write(HOUR, lines(0, 2), 2)
    service.delete_container("predlog-sinks")
    for _ in range(50):  # NOTE: Azurite lets a deleted container's name go after a moment
        try:
            await sink.write(HOUR, lines(2, 2), 2)
            break
        except SinkError as exc:
            assert not exc.permanent
            await asyncio.sleep(0.1)
    assert content(service) == lines(2, 2)


async def test_a_request_storage_refuses_for_good_is_a_permanent_failure(
    blobs: tuple[Connect, BlobServiceClient], azurite_connection: str
) -> None:
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
