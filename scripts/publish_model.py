"""Publish a model version to the configured source: MODELS_DIR, or the Blob container; or promote one.

    make publish-model NAME=fraud VERSION=2 FILE=path/to/model.onnx
    make promote-model NAME=fraud VERSION=2 [REASON="..."]      (python scripts/publish_model.py fraud 2 --promote)

The file is checked first, as every replica will check it (no larger than MAX_MODEL_BYTES; the
static checks of shared/models/vetting.py; loaded, warmed and golden-checked in the sandbox of
shared/models/sandbox.py), then its SHA-256 is recorded (`{name}/{version}/release.json`) and the
file put in place whole: `{name}/{version}/model.onnx` in MODELS_DIR (an atomic rename), or in
MODELS_CONTAINER when ModelStorage / ModelStorage__blobServiceUri is set (Azurite locally, Blob
storage in Azure, where the Blob trigger fires on one replica). A version already published with
other bytes is refused: publish a new version. Every replica picks it up (the one that loads it
first records it in Redis and the others follow within about a second; without Redis each
replica's poll, MODEL_POLL_SECONDS, finds it) as a candidate: it serves once promoted, or at
once where AUTO_PROMOTE is on (local development only; docs/models.md).

`--promote` is the control plane's promote, as `POST /api/models/{name}/activate` makes it: the
version and its file's SHA-256 are written to the control store (REDIS_URL), which every running
replica follows within seconds, and the action is audited with who ran it (user@host) and
`--reason`. Nothing written to the model source can promote. A version whose thresholds differ
from the pinned one's has the change stated; one that could never decline is refused unless
`--allow-never-decline`.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import hashlib
import socket
import sys
from pathlib import Path

# NOTE: run as a file (`python scripts/publish_model.py`, `make`), its folder is on sys.path, not the
# repository's: the repository root goes first, so a fresh clone needs no PYTHONPATH
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shared.core.wiring import model_repository
from shared.errors import ModelInvalid, ModelSourceError, ScoringError, SettingsError
from shared.models.repository import ModelRef, check_ref, check_size, publish_version
from shared.models.sandbox import Sandbox
from shared.models.vetting import vet
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


def sandbox(settings: Settings) -> Sandbox:
    """The trial every replica runs (the same checks, rows and bounds)."""
    return Sandbox(
        max_batch=settings.batch.max_size,
        graph_optimization=settings.ort.graph_optimization,
        run_deadline_ms=settings.ort.run_deadline_ms,
        arena_max_mb=settings.ort.arena_max_mb,
    )


async def promote(settings: Settings, ref: ModelRef, reason: str, allow_never_decline: bool) -> str:
    """Write the pin record every replica follows, and audit who; what to print."""
    from shared.fleet.keys import PinRecord, decode_record, pin_key
    from shared.fleet.versions import record_pin, weigh_promote
    from shared.stores.control import Actor, ControlAudit, RedisControlStore

    if not settings.redis_url:
        raise SettingsError("REDIS_URL: the control store every replica follows; a promote is written there")
    source = model_repository(settings)
    data = await asyncio.to_thread(source.read, ref)
    sha256 = hashlib.sha256(data).hexdigest()
    release = await asyncio.to_thread(source.release, ref)
    if release is not None and release.sha256 != sha256:
        raise ModelInvalid(f"{ref.name}/{ref.version}: the file is not the one published ({release.sha256[:12]}…)")
    new = vet(data).thresholds
    reach = (await asyncio.to_thread(sandbox(settings).trial, data)).max_score
    control = RedisControlStore.from_url(
        settings.redis_url, prefix=settings.redis_prefix, use_entra=settings.redis_use_entra
    )
    try:
        (payload,) = await control.read([pin_key(ref.name)])
        pinned = decode_record(ref.name, payload, PinRecord)
        live = None
        if pinned is not None and pinned.version is not None and pinned.version != ref.version:
            live = (
                pinned.version,
                vet(await asyncio.to_thread(source.read, ModelRef(ref.name, pinned.version))).thresholds,
            )
        change = weigh_promote(ref.name, ref.version, new, reach, live, allow_never_decline)
        await record_pin(control, ref.name, ref.version, sha256)
        who = f"{getpass.getuser()}@{socket.gethostname()} (scripts/publish_model.py)"
        why = "; ".join(filter(None, [reason, change]))
        await ControlAudit(control).record(Actor(who, why), "pin", ref.name, version=ref.version)
    finally:
        await control.aclose()
    said = f"; {change}" if change else ""
    return f"promoted {ref.name}/{ref.version} (sha256 {sha256}) on every replica through the control store{said}; audited as {who}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name")
    parser.add_argument("version")
    parser.add_argument("file", type=Path, nargs="?", help="the ONNX file (not with --promote)")
    parser.add_argument("--promote", action="store_true", help="promote the published version instead")
    parser.add_argument("--reason", default="", help="why (kept in the audit with who ran it)")
    parser.add_argument("--allow-never-decline", action="store_true", help="promote a version that could never decline")
    args = parser.parse_args()
    if (args.file is None) != args.promote:
        parser.error("give a FILE to publish, or --promote without one")
    try:
        settings = Settings.from_env()
        ref = ModelRef(*check_ref(args.name, args.version))
        if args.promote:
            print(asyncio.run(promote(settings, ref, args.reason, args.allow_never_decline)))
            return 0
        check_size(args.file.stat().st_size, settings.max_model_bytes, ref)  # NOTE: every replica would refuse it
        data = args.file.read_bytes()
        sandbox(settings).trial(data)  # NOTE: refuse a bad file here, not on every replica: the same checks
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
        "a candidate until promoted (make promote-model, POST /api/models/{name}/activate; AUTO_PROMOTE locally)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
