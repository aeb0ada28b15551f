"""Where model files come from: a local directory or a Blob container, same layout.

    {name}/{version}/model.onnx
    {name}/{version}/ensemble.json      an ensemble (shared/ensembles), with any file it names
    {name}/{version}/release.json       the file's content digest recorded at publish (`Release`;
                                        scripts/publish_model.py writes it)

Names and versions are checked here, for every source and the Blob trigger alike:

    name     [A-Za-z0-9][A-Za-z0-9_-]{0,63}   (no dots, no slashes: never `..`)
    version  [1-9][0-9]{0,8}                  a positive integer, no leading zero; newer is larger

A path that does not fit is not a model (listed nowhere, ignored by the trigger). A file
larger than MAX_MODEL_BYTES is refused before it is read whole.

A release record is what the publisher vouched for: a replica refuses a file whose SHA-256
differs from the recorded one (an overwrite, a swap in transit). Nothing in the container makes
a version live: whoever can write a file can write its record too, so a record's `promoted` (an
older format) is ignored; a version serves once the control plane promotes it (a pin in the
control store, admin-keyed and audited: docs/models.md).

Both sources are blocking (file and HTTP I/O); the registry calls them off the
event loop. Azure SDK errors are translated to `ModelSourceError` here.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from shared.errors import ModelInvalid, ModelSourceError

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

__all__ = [
    "BlobRepository",
    "DirectoryRepository",
    "ModelRef",
    "ModelRepository",
    "Reach",
    "Release",
    "check_ref",
    "check_size",
    "parse_ensemble_path",
    "parse_model_path",
    "publish_version",
    "version_key",
]

NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"
VERSION = r"[1-9][0-9]{0,8}"
_PATH = re.compile(rf"\A(?:(?P<container>[^/]+)/)?(?P<name>{NAME})/(?P<version>{VERSION})/model\.onnx\Z")
_ENSEMBLE_PATH = re.compile(rf"\A(?P<name>{NAME})/(?P<version>{VERSION})/ensemble\.json\Z")
_FILE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\.(?:onnx|json)\Z")
T = TypeVar("T")
_NAME, _VERSION = re.compile(rf"\A{NAME}\Z"), re.compile(rf"\A{VERSION}\Z")


class ModelRef(NamedTuple):
    name: str
    version: str


class Release(NamedTuple):
    """What the publisher recorded for a version: its file's SHA-256 (never whether it serves)."""

    sha256: str

    def encode(self) -> bytes:
        return json.dumps({"sha256": self.sha256}).encode()

    @classmethod
    def decode(cls, data: bytes, ref: ModelRef) -> Release:
        """`ModelInvalid` for a record that is not `{"sha256": <64 hex>}` (other keys, `promoted` too, ignored)."""
        try:
            raw = json.loads(data)
            release = cls(str(raw["sha256"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelInvalid(f"{ref.name}/{ref.version}: {RELEASE_FILE} is not a release record") from exc
        if not _SHA256.match(release.sha256):
            raise ModelInvalid(f"{ref.name}/{ref.version}: {RELEASE_FILE} holds no SHA-256 digest")
        return release


RELEASE_FILE = "release.json"
_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")


def parse_model_path(path: str, *, container: str | None = None) -> ModelRef | None:
    """`fraud/2/model.onnx` (or `models/fraud/2/model.onnx` with its container) → ModelRef."""
    match = _PATH.match(path.strip("/"))
    if match is None or match["container"] != container:
        return None
    return ModelRef(match["name"], match["version"])


def parse_ensemble_path(path: str) -> ModelRef | None:
    """`stack/1/ensemble.json` → ModelRef of the ensemble's declaration."""
    match = _ENSEMBLE_PATH.match(path.strip("/"))
    return None if match is None else ModelRef(match["name"], match["version"])


def _check_file(ref: ModelRef, filename: str) -> str:
    if not _FILE.match(filename):
        raise ModelInvalid(f"{ref.name}/{ref.version}: file name {filename[:80]!r} must be like meta.onnx")
    return f"{ref.name}/{ref.version}/{filename}"


def check_ref(name: str, version: str) -> ModelRef:
    """The ref, or `ModelInvalid` naming the rule a name or version breaks."""
    if not _NAME.match(name):
        raise ModelInvalid(f"model name {name[:80]!r} must match {NAME}")
    if not _VERSION.match(version):
        raise ModelInvalid(f"model version {version[:80]!r} must be an integer 1..999999999 ({VERSION})")
    return ModelRef(name, version)


def check_size(size: int, cap: int, ref: ModelRef) -> None:
    """`ModelInvalid` when a model file is larger than the cap (MAX_MODEL_BYTES)."""
    if size > cap:
        raise ModelInvalid(f"{ref.name}/{ref.version}: {size} bytes exceeds MAX_MODEL_BYTES ({cap})")


# NOTE: not the SDK's default retries (3, 15 s + 3^n apart): they hide an outage and its recovery from
# a replica for over a minute (docs/benchmark.md). The poller (MODEL_POLL_SECONDS) and the fleet watch
# (every second) are the retry; two SDK retries about a second apart ride out a blip.
RETRY: dict[str, Any] = {"retry_total": 2, "initial_backoff": 0, "increment_base": 1, "random_jitter_range": 0.2}


class Reach:
    """Whether a source answered its last call: a failure shows (`problem`) until a call succeeds."""

    def __init__(self) -> None:
        self._failure: tuple[str, float] | None = None  # (detail, since)

    def answered(self) -> None:
        self._failure = None

    def failed(self, error: ModelSourceError) -> ModelSourceError:
        since = self._failure[1] if self._failure is not None else time.monotonic()
        self._failure = (error.detail, since)
        return error

    def problem(self) -> str | None:
        if self._failure is None:
            return None
        detail, since = self._failure
        return f"models: {detail} for {time.monotonic() - since:.0f} s; the loaded versions keep serving"


def version_key(version: str) -> int:
    """Versions are integers: newer is larger."""
    return int(version)


class ModelRepository(Protocol):
    """Lists and reads model files."""

    description: str  # for logs: may hold a path or an account
    setting: str  # for callers: the setting that names this source (never a path)

    def list(self) -> list[ModelRef]: ...

    def read(self, ref: ModelRef) -> bytes: ...

    def stamp(self, ref: ModelRef) -> str:
        """A cheap token that changes when the file does (no body read)."""
        ...

    def publish(self, ref: ModelRef, data: bytes) -> None:
        """Put a model file in place whole (readers never see half a file)."""
        ...

    def ensembles(self) -> tuple[ModelRef, ...]:
        """The ensemble declarations (`{name}/{version}/ensemble.json`)."""
        ...

    def read_file(self, ref: ModelRef, filename: str) -> bytes:
        """Another file of a version's folder (an ensemble's declaration or meta-model)."""
        ...

    def release(self, ref: ModelRef) -> Release | None:
        """The version's release record (`release.json`), or None when it has none."""
        ...

    def record_release(self, ref: ModelRef, release: Release) -> None:
        """Write the version's release record whole (the publisher's side)."""
        ...

    def problem(self) -> str | None:
        """Why the source cannot be read now (its last call failed), or None: readiness lists it."""
        ...


class DirectoryRepository:
    """Models under a local directory (the repo's `models/` by default)."""

    setting = "MODELS_DIR"

    def __init__(self, root: str | Path, *, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.root = Path(root)
        self.description = f"directory {self.root}"
        self._max_bytes = max_bytes
        self.reach = Reach()

    def problem(self) -> str | None:
        return self.reach.problem()

    def list(self) -> list[ModelRef]:
        if not self.root.is_dir():
            raise self.reach.failed(ModelSourceError(self._missing()))
        self.reach.answered()
        refs = (parse_model_path(p.relative_to(self.root).as_posix()) for p in self.root.glob("*/*/model.onnx"))
        return sorted(r for r in refs if r is not None)

    def _missing(self) -> str:
        return (
            f"MODELS_DIR: no directory at {self.root.resolve()} (MODELS_DIR={str(self.root)!r}); fix: set MODELS_DIR "
            "to the folder holding <name>/<version>/model.onnx, or run from the repository root (models/)"
        )

    def read(self, ref: ModelRef) -> bytes:
        path = self.root / ref.name / ref.version / "model.onnx"
        try:
            check_size(path.stat().st_size, self._max_bytes, ref)
            return path.read_bytes()
        except OSError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}: {exc.strerror}") from exc

    def ensembles(self) -> tuple[ModelRef, ...]:
        if not self.root.is_dir():
            raise ModelSourceError(self._missing())
        refs = (parse_ensemble_path(p.relative_to(self.root).as_posix()) for p in self.root.glob("*/*/ensemble.json"))
        return tuple(sorted(r for r in refs if r is not None))

    def read_file(self, ref: ModelRef, filename: str) -> bytes:
        path = self.root / _check_file(ref, filename)
        try:
            check_size(path.stat().st_size, self._max_bytes, ref)
            return path.read_bytes()
        except OSError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}/{filename}: {exc.strerror}") from exc

    def stamp(self, ref: ModelRef) -> str:
        try:
            st = (self.root / ref.name / ref.version / "model.onnx").stat()
        except OSError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}: {exc.strerror}") from exc
        return f"{st.st_mtime_ns}-{st.st_size}"

    def publish(self, ref: ModelRef, data: bytes) -> None:
        self._write(ref, "model.onnx", data)

    def release(self, ref: ModelRef) -> Release | None:
        path = self.root / ref.name / ref.version / RELEASE_FILE
        try:
            data = path.read_bytes()[:4096]
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}/{RELEASE_FILE}: {exc.strerror}") from exc
        return Release.decode(data, ref)

    def record_release(self, ref: ModelRef, release: Release) -> None:
        self._write(ref, RELEASE_FILE, release.encode())

    def _write(self, ref: ModelRef, filename: str, data: bytes) -> None:
        check_ref(*ref)
        folder = self.root / ref.name / ref.version
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{filename}.partial"
        partial.write_bytes(data)
        partial.replace(folder / filename)  # NOTE: atomic: a poller never reads half a file


class BlobRepository:
    """Models in a Blob container (connection string locally, managed identity in Azure)."""

    setting = "MODELS_CONTAINER"

    def __init__(self, container: ContainerClient, *, max_bytes: int = 256 * 1024 * 1024) -> None:
        self._container = container
        self.description = f"blob container {container.container_name}"
        self._max_bytes = max_bytes
        self.reach = Reach()

    @classmethod
    def connect(
        cls, *, container: str, connection_string: str | None, blob_uri: str | None, max_bytes: int = 256 * 1024 * 1024
    ) -> BlobRepository:
        from azure.storage.blob import BlobServiceClient  # imported only when blobs are used

        if connection_string:
            try:
                service = BlobServiceClient.from_connection_string(connection_string, **RETRY)
            except ValueError as exc:
                raise ModelSourceError(f"ModelStorage is not a valid connection string: {exc}") from exc
        elif blob_uri:
            from azure.identity import DefaultAzureCredential

            service = BlobServiceClient(account_url=blob_uri, credential=DefaultAzureCredential(), **RETRY)
        else:
            raise ModelSourceError("no ModelStorage connection configured")
        return cls(service.get_container_client(container), max_bytes=max_bytes)

    def problem(self) -> str | None:
        return self.reach.problem()

    def list(self) -> list[ModelRef]:
        def names() -> list[ModelRef]:
            return sorted(r for r in (parse_model_path(b.name) for b in self._container.list_blobs()) if r is not None)

        return self._call(f"list {self.description}", names)

    def read(self, ref: ModelRef) -> bytes:
        def download() -> bytes:
            blob = self._container.get_blob_client(_blob_name(ref))
            check_size(blob.get_blob_properties().size, self._max_bytes, ref)  # NOTE: before any byte of the body
            return blob.download_blob().readall()

        return self._call(f"read {ref.name}/{ref.version}", download)

    def ensembles(self) -> tuple[ModelRef, ...]:
        def names() -> tuple[ModelRef, ...]:
            refs = (parse_ensemble_path(b.name) for b in self._container.list_blobs())
            return tuple(sorted(r for r in refs if r is not None))

        return self._call(f"list {self.description}", names)

    def read_file(self, ref: ModelRef, filename: str) -> bytes:
        def download() -> bytes:
            blob = self._container.get_blob_client(_check_file(ref, filename))
            check_size(blob.get_blob_properties().size, self._max_bytes, ref)
            return blob.download_blob().readall()

        return self._call(f"read {ref.name}/{ref.version}/{filename}", download)

    def stamp(self, ref: ModelRef) -> str:
        def etag() -> str:
            return str(self._container.get_blob_client(_blob_name(ref)).get_blob_properties().etag)

        return self._call(f"read {ref.name}/{ref.version}", etag)

    def publish(self, ref: ModelRef, data: bytes) -> None:
        check_ref(*ref)

        def upload() -> None:
            self._container.upload_blob(_blob_name(ref), data, overwrite=True)  # committed whole

        self._call(f"write {ref.name}/{ref.version}", upload)

    def release(self, ref: ModelRef) -> Release | None:
        from azure.core.exceptions import ResourceNotFoundError

        def download() -> bytes | None:
            blob = self._container.get_blob_client(f"{ref.name}/{ref.version}/{RELEASE_FILE}")
            try:
                return bytes(blob.download_blob(offset=0, length=4096).readall())
            except ResourceNotFoundError:
                return None

        data = self._call(f"read {ref.name}/{ref.version}/{RELEASE_FILE}", download)
        return None if data is None else Release.decode(data, ref)

    def record_release(self, ref: ModelRef, release: Release) -> None:
        check_ref(*ref)

        def upload() -> None:
            name = f"{ref.name}/{ref.version}/{RELEASE_FILE}"
            self._container.upload_blob(name, release.encode(), overwrite=True)

        self._call(f"write {ref.name}/{ref.version}/{RELEASE_FILE}", upload)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        """`call()`; an Azure SDK error becomes `ModelSourceError` ("cannot {what}: ...") and is
        remembered until a call succeeds (readiness lists it)."""
        from azure.core.exceptions import AzureError

        try:
            found = call()
        except AzureError as exc:
            raise self.reach.failed(ModelSourceError(f"cannot {what}: {type(exc).__name__}")) from exc
        self.reach.answered()
        return found


def publish_version(source: ModelRepository, ref: ModelRef, data: bytes) -> Release:
    """Record the file's digest (a candidate), then put the file in place: the publisher's side.

    A version's file never changes: a version already published (or present) with other bytes is
    refused (`ModelInvalid`); the same bytes again change nothing.
    """
    check_ref(*ref)
    sha256 = hashlib.sha256(data).hexdigest()
    recorded = source.release(ref)
    if recorded is None and ref in source.list():
        recorded = Release(hashlib.sha256(source.read(ref)).hexdigest())
    if recorded is not None and recorded.sha256 != sha256:
        raise ModelInvalid(
            f"{ref.name}/{ref.version} is already published with sha256 {recorded.sha256[:12]}…: a version's "
            "file never changes; publish it as a new version"
        )
    release = recorded or Release(sha256)
    source.record_release(ref, release)  # NOTE: first: a replica that sees the file sees its digest
    source.publish(ref, data)
    return release


def _blob_name(ref: ModelRef) -> str:
    return f"{ref.name}/{ref.version}/model.onnx"
