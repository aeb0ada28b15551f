"""Where the prediction log's lines go: a local directory or append blobs, the same names.

    model={model}/version={version}/date={YYYY-MM-DD}/hour={HH}/{replica}.jsonl
    outcomes/date={YYYY-MM-DD}/hour={HH}/{replica}.jsonl         (outcomes learned later: outcome_name)

One object per replica per UTC hour: each writer appends only to its own, so lines of two
replicas never interleave and no write needs a lock or a lease; a reader takes the hour's
folder whole. An append blob holds at most 50,000 blocks: past `max_blocks` a writer goes on
in `{replica}.1.jsonl`, `{replica}.2.jsonl`, ... of the same hour.

A write either lands whole or raises `SinkError`, whose `landed` says how many leading bytes
of the lines did land (always whole lines) and `permanent` whether the rest can ever land.
The log owns the retries (sinks make none of their own); a sink makes them exact:

    DirectorySink   a failed append is truncated back to where it began: nothing half-written;
                    it keeps at most `max_bytes` of its own files (DIRECTORY_CAP): an
                    hour's file rolls to its next segment past an eighth of that, and past the
                    cap the oldest files go first (a developer can leave `make run` running)
    BlobSink        each block is appended at the offset the sink expects (`appendpos_condition`);
                    a retry of a block that did land (its answer lost to a timeout) is refused
                    with AppendPositionConditionNotMet, and the sink finds the block in place
                    (the bytes at that offset are the lines it was sending) instead of writing
                    it twice
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from shared.errors import SinkError
from shared.settings import Settings

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob.aio import BlobClient, ContainerClient

__all__ = [
    "DIRECTORY_CAP",
    "NAME",
    "BlobSink",
    "DirectorySink",
    "Partition",
    "Sink",
    "SinkError",
    "object_name",
    "outcome_name",
    "sink_from_settings",
]

log = logging.getLogger(__name__)
T = TypeVar("T")
Partition = tuple[str, str, str]  # (model, version, UTC hour `YYYY-MM-DDTHH`): DecisionRecord.partition
_SEGMENT = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_HOUR = re.compile(r"\A(\d{4}-\d{2}-\d{2})T(\d{2})\Z")
NAME = re.compile(
    r"(?:\A|/)model=(?P<model>[^/]+)/version=(?P<version>[^/]+)/date=(?P<date>\d{4}-\d{2}-\d{2})/"
    r"hour=(?P<hour>\d{2})/[^/]+\.jsonl\Z"
)
BLOCK_BYTES = 4 * 1024 * 1024  # the largest append block every service version (and Azurite) takes
MAX_BLOCKS = 50_000  # committed blocks an append blob holds at most
# NOTE: a 4xx that no retry of the same request can turn into a success: the request itself is refused.
# 403 is not among them (a role assignment still propagating, a key being rotated: the operator fixes it),
# nor 404/409/412, which the sink resolves itself (creates, rolls over, reconciles).
_REFUSED = frozenset({400, 405, 411, 413, 414})


class Sink(Protocol):
    """Appends JSON lines to the object of one partition."""

    name: str  # "dir" or "blob": the stats and readiness name it
    write_bytes: int  # the most one write is given (the log joins no more lines than this at once)

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        """Append `lines` (`count` JSON lines) to `partition`'s object; `SinkError` on failure."""
        ...

    async def aclose(self) -> None: ...


def object_name(partition: Partition, replica: str, segment: int = 0) -> str:
    """The object (file or blob) `replica` appends `partition`'s lines to; `SinkError` for a name
    that is not a plain path segment (it could never be written)."""
    model, version, hour = partition
    match = _HOUR.match(hour)
    if match is None or not _SEGMENT.match(model) or not _SEGMENT.match(version):
        raise SinkError(f"not a partition a path can name: {partition!r:.120}", permanent=True)
    suffix = f".{segment}" if segment else ""
    return f"model={model}/version={version}/date={match[1]}/hour={match[2]}/{replica}{suffix}.jsonl"


def outcome_name(partition: Partition, replica: str, segment: int = 0) -> str:
    """The object outcomes go to, beside the decisions (`partition`'s model and version are unused:
    an outcome is about an event, whichever version decided it)."""
    match = _HOUR.match(partition[2])
    if match is None:
        raise SinkError(f"not a partition a path can name: {partition!r:.120}", permanent=True)
    suffix = f".{segment}" if segment else ""
    return f"outcomes/date={match[1]}/hour={match[2]}/{replica}{suffix}.jsonl"


Names = Callable[[Partition, str, int], str]


def _check_replica(replica: str) -> str:
    if not _SEGMENT.match(replica):
        raise ValueError(f"replica {replica[:80]!r} must match {_SEGMENT.pattern} (it names a file)")
    return replica


# the local log's files one process keeps (a developer's disk; Azure writes blobs): ~30 s of records
# at capacity (~9 MB a second), hours at a developer's pace
DIRECTORY_CAP = 256 << 20


class DirectorySink:
    """Hourly JSONL files under `root` (`make run`), at most `max_bytes` of them; file I/O runs
    in a worker thread."""

    name = "dir"
    write_bytes = 1 << 20  # a second's records at capacity are ~9 MB: joining them at once held the loop ms

    def __init__(self, root: Path, replica: str, max_bytes: int = DIRECTORY_CAP, *, names: Names = object_name) -> None:
        self.root = root
        self._names = names
        self._replica = _check_replica(replica)
        self.max_bytes = max_bytes
        self._segment_bytes = max(4096, max_bytes // 8)
        self._sizes: dict[Path, int] = {}  # this writer's files, oldest first, and their sizes
        self._segments: dict[Partition, int] = {}  # the segment each partition appends to now
        self.removed_bytes = 0  # what the cap took, oldest first
        self._scanned = False

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        try:
            await asyncio.to_thread(self._write, partition, lines)
        except OSError as exc:
            raise SinkError(f"{type(exc).__name__}: {exc.strerror or exc}") from exc

    def _write(self, partition: Partition, lines: bytes) -> None:
        """In the writer's thread (one write at a time): append, roll, and keep under the cap."""
        if not self._scanned:
            self._scan()
        segment = self._segments.get(partition, 0)
        path = self.root / self._names(partition, self._replica, segment)
        if self._sizes.get(path, 0) and self._sizes[path] + len(lines) > self._segment_bytes:
            segment += 1
            path = self.root / self._names(partition, self._replica, segment)
        self._segments[partition] = segment
        _append(path, lines)
        self._sizes[path] = self._sizes.pop(path, 0) + len(lines)  # re-inserted: newest last
        self._trim(keep=path)

    def _scan(self) -> None:
        """What an earlier run of this writer left, oldest first: it counts against the cap."""
        top = "outcomes" if self._names is outcome_name else "model=*/version=*"
        found = sorted(self.root.glob(f"{top}/date=*/hour=*/{self._replica}*.jsonl"), key=_mtime)
        self._sizes = {path: path.stat().st_size for path in found}
        self._scanned = True
        self._trim(keep=None)

    def _trim(self, keep: Path | None) -> None:
        total = sum(self._sizes.values())
        for path in list(self._sizes):
            if total <= self.max_bytes:
                return
            if path == keep:
                continue
            size = self._sizes.pop(path)
            path.unlink(missing_ok=True)
            total -= size
            self.removed_bytes += size

    async def aclose(self) -> None:
        return None  # every write opens and closes its file: nothing is held open


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


def _append(path: Path, lines: bytes) -> None:
    """Append `lines` whole, or truncate back to where the append began and raise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        view = memoryview(lines)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.ftruncate(fd, start)  # NOTE: a partial line would break every reader of the file
            raise
    finally:
        os.close(fd)


@dataclass
class _Blob:
    """The append blob this sink writes one partition to, and the offset of its next block."""

    client: BlobClient
    segment: int
    offset: int
    blocks: int


class BlobSink:
    """Hourly append blobs in one container (PREDICTION_LOG_CONTAINER of the model storage account).

    The async client (azure.storage.blob.aio over aiohttp, already installed for the async
    identity) rather than the sync one in a thread: a flush is a request or two per partition, awaited
    on the loop with nothing blocking it and no worker thread taken from the models' file reads.
    The client opens its aiohttp session on the first request, inside the running loop.
    """

    name = "blob"

    def __init__(
        self,
        container: ContainerClient,
        replica: str,
        *,
        timeout_s: float = 10.0,
        block_bytes: int = BLOCK_BYTES,
        max_blocks: int = MAX_BLOCKS,
        credential: AsyncTokenCredential | None = None,
        names: Names = object_name,
    ) -> None:
        self._container = container
        self._names = names
        self._replica = _check_replica(replica)
        self._timeout_s = timeout_s
        self._block_bytes = block_bytes
        self.write_bytes = block_bytes  # one append block a write
        self._max_blocks = max_blocks
        self._credential = credential
        self._blobs: dict[Partition, _Blob] = {}

    @classmethod
    def connect(
        cls,
        *,
        container: str,
        connection_string: str | None,
        blob_uri: str | None,
        replica: str,
        **options: Any,
    ) -> BlobSink:
        """A sink in `container`: by connection string (locally, Azurite) or by `blob_uri` and
        the managed identity (Azure), as the model repository reaches the same account."""
        from azure.storage.blob.aio import ContainerClient  # imported only when blobs are used

        # NOTE: no SDK retries: the log retries with its own backoff while the records wait in memory.
        sdk: dict[str, Any] = {"retry_total": 0, "connection_timeout": 5}
        if connection_string:
            return cls(ContainerClient.from_connection_string(connection_string, container, **sdk), replica, **options)
        if not blob_uri:
            raise ValueError("PREDICTION_LOG=blob needs ModelStorage or ModelStorage__blobServiceUri")
        from azure.identity.aio import DefaultAzureCredential

        credential = DefaultAzureCredential()
        client = ContainerClient(blob_uri, container, credential=credential, **sdk)
        return cls(client, replica, credential=credential, **options)

    async def write(self, partition: Partition, lines: bytes, count: int) -> None:
        from azure.core.exceptions import HttpResponseError

        done = 0
        try:
            while done < len(lines):
                done += await self._append(partition, lines, done)
        except SinkError as exc:
            raise SinkError(exc.detail, landed=done, permanent=exc.permanent) from exc
        except HttpResponseError as exc:
            error = _translated(exc)
            raise SinkError(error.detail, landed=done, permanent=error.permanent) from exc

    async def _append(self, partition: Partition, lines: bytes, done: int) -> int:
        """Append the next block of `lines` from `done`: the bytes that landed (0 after a roll-over)."""
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        blob = await self._open(partition)
        block = lines[done : _block_end(lines, done, self._block_bytes)]
        try:
            # a stream, not bytes: aiohttp warns that a large bytes body may hold the loop while it is sent
            body = io.BytesIO(block)
            answer = await self._call(blob.client.append_block(body, len(block), appendpos_condition=blob.offset))
        except ResourceNotFoundError:
            self._blobs.pop(partition, None)  # the blob or its container went away: open them again
            raise SinkError("the blob went away (it is created again on the next try)") from None
        except HttpResponseError as exc:
            return await self._refused(partition, blob, exc, lines, done)
        blob.offset += len(block)
        blocks = answer.get("blob_committed_block_count")
        blob.blocks = blocks if isinstance(blocks, int) else blob.blocks + 1
        if blob.blocks >= self._max_blocks:
            self._blobs.pop(partition, None)  # the next write opens the next segment
        return len(block)

    async def _refused(self, partition: Partition, blob: _Blob, exc: HttpResponseError, lines: bytes, done: int) -> int:
        code = _code(exc)
        if code == "AppendPositionConditionNotMet":
            return await self._reconcile(blob, lines, done)
        if code in ("BlockCountExceedsLimit", "InvalidBlobType"):
            self._blobs[partition] = await self._open_segment(partition, blob.segment + 1)
            return 0
        raise _translated(exc) from exc

    async def _reconcile(self, blob: _Blob, lines: bytes, done: int) -> int:
        """The blob is longer than expected: the bytes of `lines` found at the expected offset."""
        size = (await self._call(blob.client.get_blob_properties())).size
        gap, expected = size - blob.offset, blob.offset
        blob.offset = size
        if 0 < gap <= len(lines) - done:
            found = await self._call(self._read(blob.client, expected, gap))
            if found == lines[done : done + gap]:
                return gap  # NOTE: an earlier try landed though its answer was lost: not written twice
        log.warning(
            "prediction log: %s grew by %d bytes it did not write (another writer?)", blob.client.blob_name, gap
        )
        return 0

    @staticmethod
    async def _read(client: BlobClient, offset: int, length: int) -> bytes:
        return await (await client.download_blob(offset=offset, length=length)).readall()

    async def _open(self, partition: Partition) -> _Blob:
        blob = self._blobs.get(partition)
        if blob is None:
            blob = self._blobs[partition] = await self._open_segment(partition, 0)
            while len(self._blobs) > 64:  # hours go by; keep the recent partitions only
                del self._blobs[next(iter(self._blobs))]
        return blob

    async def _open_segment(self, partition: Partition, segment: int) -> _Blob:
        """The first segment from `segment` with room left, created when absent."""
        from azure.core.exceptions import ResourceNotFoundError
        from azure.storage.blob import BlobType

        while True:
            client = self._container.get_blob_client(self._names(partition, self._replica, segment))
            try:
                props = await self._call(client.get_blob_properties())
            except ResourceNotFoundError:
                await self._create(client)
                return _Blob(client, segment, 0, 0)
            blocks = props.append_blob_committed_block_count or 0
            if props.blob_type == BlobType.APPENDBLOB and blocks < self._max_blocks:
                return _Blob(client, segment, props.size, blocks)
            segment += 1

    async def _create(self, client: BlobClient) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
        from azure.storage.blob import ContentSettings

        async def create() -> None:
            # NOTE: IfMissing: creating an append blob over an existing one would empty it
            await self._call(
                client.create_append_blob(
                    content_settings=ContentSettings(content_type="application/x-ndjson"),
                    match_condition=MatchConditions.IfMissing,
                )
            )

        try:
            await create()
        except ResourceExistsError:
            pass  # this replica's earlier run made it; its size was 0 when we looked, or we reconcile
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                await self._call(self._container.create_container())
            await create()

    async def _call(self, call: Awaitable[T]) -> T:
        """`call` under the sink's deadline; a timeout or a transport failure is a `SinkError` (retried)."""
        from azure.core.exceptions import AzureError, HttpResponseError

        try:
            async with asyncio.timeout(self._timeout_s):
                return await call
        except TimeoutError:
            raise SinkError(f"TimeoutError: no answer within {self._timeout_s:g} s") from None
        except HttpResponseError:
            raise  # the caller reads its status and code
        except (AzureError, OSError) as exc:
            raise SinkError(type(exc).__name__) from exc

    async def aclose(self) -> None:
        await self._container.close()
        if self._credential is not None:
            await self._credential.close()


def _block_end(lines: bytes, start: int, size: int) -> int:
    """The end of the next block from `start`: at most `size` bytes, whole lines only."""
    end = start + size
    if end >= len(lines):
        return len(lines)
    cut = lines.rfind(b"\n", start, end)
    if cut < 0:
        raise SinkError(f"a line longer than a block ({size} bytes)", permanent=True)
    return cut + 1


def _code(exc: HttpResponseError) -> str:
    """The storage error code (`x-ms-error-code`), which the storage SDK sets on its errors (a str enum)."""
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _translated(exc: HttpResponseError) -> SinkError:
    status = exc.status_code or 0
    what = f"{type(exc).__name__} {status} {_code(exc)}".strip()
    return SinkError(what, permanent=status in _REFUSED)


def sink_from_settings(settings: Settings, replica: str, *, names: Names = object_name) -> Sink | None:
    """The sink PREDICTION_LOG names (None when it is `off`); `names=outcome_name`: its outcomes' sink."""
    policy = settings.prediction_log
    if policy.sink == "off":
        return None
    if policy.sink == "dir":
        return DirectorySink(Path(policy.directory), replica, names=names)
    return BlobSink.connect(
        container=policy.container,
        connection_string=settings.model_storage,
        blob_uri=settings.model_storage_blob_uri,
        replica=replica,
        names=names,
    )
