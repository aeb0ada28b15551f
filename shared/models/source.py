"""Where model files come from: a local directory or a Blob container, same layout.

    {name}/{version}/model.onnx

Both sources are blocking (file and HTTP I/O); the registry calls them off the
event loop. Azure SDK errors are translated to `ModelSourceError` here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from shared.errors import ModelSourceError

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

__all__ = ["BlobSource", "DirectorySource", "ModelRef", "ModelSource", "parse_model_path", "version_key"]

_PATH = re.compile(
    r"^(?:(?P<container>[^/]+)/)?(?P<name>[A-Za-z0-9_.-]{1,64})/(?P<version>[A-Za-z0-9_.-]{1,64})/model\.onnx$"
)


class ModelRef(NamedTuple):
    name: str
    version: str


def parse_model_path(path: str, *, container: str | None = None) -> ModelRef | None:
    """`fraud/2/model.onnx` (or `models/fraud/2/model.onnx` with its container) → ModelRef."""
    match = _PATH.match(path.strip("/"))
    if match is None or match["container"] != container:
        return None
    return ModelRef(match["name"], match["version"])


def version_key(version: str) -> tuple[int, int, str]:
    """Numeric versions sort numerically and after any non-numeric ones."""
    return (1, int(version), "") if version.isdigit() else (0, 0, version)


class ModelSource(Protocol):
    """Lists and reads model files."""

    description: str

    def list(self) -> list[ModelRef]: ...

    def read(self, ref: ModelRef) -> bytes: ...


class DirectorySource:
    """Models under a local directory (the repo's `models/` by default)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.description = f"directory {self.root}"

    def list(self) -> list[ModelRef]:
        if not self.root.is_dir():
            raise ModelSourceError(f"model directory {self.root} does not exist")
        refs = (parse_model_path(p.relative_to(self.root).as_posix()) for p in self.root.glob("*/*/model.onnx"))
        return sorted(r for r in refs if r is not None)

    def read(self, ref: ModelRef) -> bytes:
        try:
            return (self.root / ref.name / ref.version / "model.onnx").read_bytes()
        except OSError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}: {exc.strerror}") from exc


class BlobSource:
    """Models in a Blob container (connection string locally, managed identity in Azure)."""

    def __init__(self, container: ContainerClient) -> None:
        self._container = container
        self.description = f"blob container {container.container_name}"

    @classmethod
    def connect(cls, *, container: str, connection_string: str | None, blob_uri: str | None) -> BlobSource:
        from azure.storage.blob import BlobServiceClient  # NOTE: imported only when blobs are used

        if connection_string:
            try:
                service = BlobServiceClient.from_connection_string(connection_string)
            except ValueError as exc:
                raise ModelSourceError(f"ModelStorage is not a valid connection string: {exc}") from exc
        elif blob_uri:
            from azure.identity import DefaultAzureCredential

            service = BlobServiceClient(account_url=blob_uri, credential=DefaultAzureCredential())
        else:
            raise ModelSourceError("no ModelStorage connection configured")
        return cls(service.get_container_client(container))

    def list(self) -> list[ModelRef]:
        from azure.core.exceptions import AzureError

        try:
            refs = (parse_model_path(b.name) for b in self._container.list_blobs())
            return sorted(r for r in refs if r is not None)
        except AzureError as exc:
            raise ModelSourceError(f"cannot list {self.description}: {type(exc).__name__}") from exc

    def read(self, ref: ModelRef) -> bytes:
        from azure.core.exceptions import AzureError

        try:
            return self._container.download_blob(f"{ref.name}/{ref.version}/model.onnx").readall()
        except AzureError as exc:
            raise ModelSourceError(f"cannot read {ref.name}/{ref.version}: {type(exc).__name__}") from exc
