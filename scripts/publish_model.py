"""Publish a model version to the configured source: MODELS_DIR, or the Blob container; or promote one.

    make publish-model NAME=fraud VERSION=2 FILE=path/to/model.onnx
    python scripts/publish_model.py fraud 2 --promote

The file is checked first, as every replica will check it (no larger than MAX_MODEL_BYTES; the
static checks of shared/models/vetting.py; loaded, warmed and golden-checked in the sandbox of
shared/models/sandbox.py), then its SHA-256 is recorded (`{name}/{version}/release.json`) and the
file put in place whole: `{name}/{version}/model.onnx` in MODELS_DIR (an atomic rename), or in
MODELS_CONTAINER when ModelStorage / ModelStorage__blobServiceUri is set (Azurite locally, Blob
storage in Azure, where the Blob trigger fires on one replica). A version already published with
other bytes is refused: publish a new version. Every replica picks it up (the one that loads it
first records it in Redis and the others follow within about a second; without Redis each
replica's poll, MODEL_POLL_SECONDS, finds it) as a candidate: it serves once promoted
(`--promote`, a pin, a canary's promote) or at once where AUTO_PROMOTE is on (docs/models.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shared.core.wiring import model_repository
from shared.errors import ModelSourceError, ScoringError
from shared.models.repository import ModelRef, check_ref, check_size, promote_version, publish_version
from shared.models.sandbox import Sandbox
from shared.settings import Settings


def create_container_if_missing(settings: Settings) -> bool:
    """Create MODELS_CONTAINER when it does not exist (a fresh Azurite): True when it was created.

    NOTE: checked first, not created blind: in Azure infra/ creates the container, and a
    principal whose role is scoped to it may read it but not create containers.
    """
    from azure.core.exceptions import AzureError
    from azure.storage.blob import BlobServiceClient

    if settings.model_storage:
        service = BlobServiceClient.from_connection_string(settings.model_storage)
    else:
        from azure.identity import DefaultAzureCredential

        service = BlobServiceClient(str(settings.model_storage_blob_uri), credential=DefaultAzureCredential())
    container = service.get_container_client(settings.models_container)
    try:
        if container.exists():
            return False
        container.create_container()
    except AzureError as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ModelSourceError(
            f"cannot create the blob container {settings.models_container!r}: {type(exc).__name__} {first}"
        ) from exc
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("file", type=Path, nargs="?", help="the ONNX file (not with --promote)")
    parser.add_argument("--promote", action="store_true", help="promote the published version instead")
    args = parser.parse_args()
    if (args.file is None) != args.promote:
        parser.error("give a FILE to publish, or --promote without one")
    settings = Settings.from_env()
    try:
        ref = ModelRef(*check_ref(args.name, args.version))
        if args.promote:
            source = model_repository(settings)
            release = promote_version(source, ref)
            print(f"promoted {ref.name}/{ref.version} (sha256 {release.sha256}) in {source.description}")
            return 0
        check_size(args.file.stat().st_size, settings.max_model_bytes, ref)  # NOTE: every replica would refuse it
        data = args.file.read_bytes()
        # NOTE: refuse a bad file here, not on every replica: the same checks and sandbox they run
        sandbox = Sandbox(max_batch=settings.batch.max_size, graph_optimization=settings.ort.graph_optimization)
        sandbox.trial(data)
        source = model_repository(settings)
        if settings.uses_blob_models and create_container_if_missing(settings):
            print(f"publish-model: created the blob container {settings.models_container!r} (it was missing)")
        release = publish_version(source, ref, data)
    except ScoringError as exc:
        print(f"publish-model: {exc.detail}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"publish-model: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    print(
        f"published {ref.name}/{ref.version} ({len(data)} bytes, sha256 {release.sha256}) to {source.description}; "
        f"a candidate until promoted (--promote, a pin, or AUTO_PROMOTE)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
