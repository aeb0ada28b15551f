"""The azd postdeploy hook, replayed: publish the seed model, then the smoke test, then Event Grid.

infra/hooks/postdeploy.sh runs as azd runs it (POSIX sh, from the repository root, azd's outputs as
its environment: docs/platform.md P67), against Azurite as the models container and the app served
as `make run` serves it, reading its models from that container only (AUTO_PROMOTE off, as in Azure). `az` is a stand-in on the PATH that records each call and answers the few reads
the hooks make (azd and Azure cannot run here); everything else is real: the publish script, the
app, its readiness, `/api/score`.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "infra" / "hooks"

FAKE_AZ = """#!/bin/sh
echo "az $*" >>"$AZ_LOG"
case "$*" in
  *"rest --method get"*) echo true ;;
  *"function keys show"*) echo local-key ;;
  *"containerapp show"*) echo 127.0.0.1 ;;
  *"account show --query user.type"*) echo user ;;
  *"ad signed-in-user show"*) echo 11111111-2222-3333-4444-555555555555 ;;
  *"storage account show"*"--query id"*) echo /subscriptions/0/resourceGroups/rg-replay/providers/Microsoft.Storage/storageAccounts/streplay ;;
  *"storage account show"*"primaryEndpoints.blob"*) echo https://127.0.0.1:9/ ;;
  *"account get-access-token"*) exit 1 ;;
esac
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def container(azurite_connection: str) -> Iterator[str]:
    """A models container name that does not exist yet (a fresh account, as infra/ leaves it: empty)."""
    from azure.storage.blob import BlobServiceClient

    name = f"models-{uuid.uuid4().hex[:12]}"
    yield name
    service = BlobServiceClient.from_connection_string(azurite_connection)
    if service.get_container_client(name).exists():
        service.delete_container(name)


@pytest.fixture
def app_url(azurite_connection: str, container: str, tmp_path: Path) -> Iterator[str]:
    """The app, as `make run` serves it, reading models only from the (empty) Blob container."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PORT": str(port),
        "ModelStorage": azurite_connection,
        "MODELS_CONTAINER": container,
        "MODEL_POLL_SECONDS": "0.5",
        "PREDICTION_LOG": "off",
        "REDIS_URL": "",
        "LOG_LEVEL": "WARNING",
        "AUTO_PROMOTE": "false",  # NOTE: as in Azure (ModelStorage__blobServiceUri): a new version is a candidate
    }
    log = (tmp_path / "app.log").open("w")
    app = subprocess.Popen([sys.executable, "-m", "shared"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.terminate()
        app.wait(timeout=30)
        log.close()


def run_hook(script: str, tmp_path: Path, azurite: str, container: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` with azd's environment for this deployment, `az` the recording stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    az = bin_dir / "az"
    az.write_text(FAKE_AZ)
    az.chmod(az.stat().st_mode | stat.S_IXUSR)
    azd = {
        "AZURE_RESOURCE_GROUP": "rg-replay",
        "SERVICE_SCORING_NAME": "ca-replay-scoring",
        "SERVICE_SCORING_RESOURCE_ID": "/subscriptions/0/resourceGroups/rg-replay/providers/Microsoft.App/containerApps/x",
        "SCORING_SCALE": '{"allowScalingRuleOverride":true,"minReplicas":2,"maxReplicas":12,"rules":[]}',
        "EVENTGRID_SYSTEM_TOPIC_NAME": "evgt-replay-models",
        "STORAGE_ACCOUNT_NAME": "streplay",
        "MODELS_CONTAINER": container,
    }
    full = {
        **os.environ,
        **azd,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "AZ_LOG": str(tmp_path / "az.log"),
        "PY": sys.executable,
        "ModelStorage": azurite,
        **env,
    }
    return subprocess.run(["sh", str(HOOKS / script)], cwd=REPO, env=full, capture_output=True, text=True, timeout=300)


def az_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "az.log"
    return log.read_text().splitlines() if log.exists() else []


def test_postdeploy_publishes_then_smoke_tests_then_subscribes(
    app_url: str, azurite_connection: str, container: str, tmp_path: Path
) -> None:
    done = run_hook(
        "postdeploy.sh",
        tmp_path,
        azurite_connection,
        container,
        SERVICE_SCORING_URI=app_url,
        SCORING_SMOKE_TIMEOUT_S="60",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    steps = [
        out.index("KEDA scale rules set"),
        out.index("published fraud/1"),
        out.index("smoke: ready"),
        out.index("smoke: POST /api/score answered"),
        out.index("Event Grid subscription"),
    ]
    assert steps == sorted(steps), out
    assert '"event_id":"evt-1001"' in out and '"model_version":"1"' in out
    calls = az_calls(tmp_path)
    assert [c.split()[1] for c in calls] == [
        "rest",
        "rest",
        "containerapp",
        "containerapp",
        "containerapp",
        "eventgrid",
    ]
    assert "hostKey" in calls[2] and "blobs_extension" in calls[4]


def test_without_the_publish_step_the_smoke_test_fails_and_nothing_is_subscribed(
    app_url: str, azurite_connection: str, container: str, tmp_path: Path
) -> None:
    done = run_hook(
        "postdeploy.sh",
        tmp_path,
        azurite_connection,
        container,
        SERVICE_SCORING_URI=app_url,
        SCORING_SEED_MODEL="false",
        SCORING_SMOKE_TIMEOUT_S="8",
    )
    assert done.returncode != 0
    assert "is not ready after 8 s" in done.stderr, done.stdout + done.stderr
    assert not any(" eventgrid " in call for call in az_calls(tmp_path))


def test_a_version_already_in_the_container_is_not_published_again(
    azurite_connection: str, container: str, tmp_path: Path
) -> None:
    from azure.storage.blob import BlobServiceClient

    first = run_hook("publish-seed-model.sh", tmp_path, azurite_connection, container)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"created the blob container '{container}'" in first.stdout
    blob = BlobServiceClient.from_connection_string(azurite_connection).get_blob_client(container, "fraud/1/model.onnx")
    etag = blob.get_blob_properties().etag
    again = run_hook("publish-seed-model.sh", tmp_path, azurite_connection, container)
    assert again.returncode == 0 and "not published again" in again.stdout, again.stdout + again.stderr
    assert blob.get_blob_properties().etag == etag
    assert blob.download_blob().readall() == (REPO / "models" / "fraud" / "1" / "model.onnx").read_bytes()
    assert az_calls(tmp_path) == []  # NOTE: with a connection string nothing in Azure is touched


def test_the_publish_script_creates_a_missing_container_and_says_so(
    azurite_connection: str, container: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ModelStorage": azurite_connection, "MODELS_CONTAINER": container}
    model = str(REPO / "models" / "fraud" / "1" / "model.onnx")
    command = [sys.executable, "scripts/publish_model.py", "fraud", "1", model]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"created the blob container '{container}' (it was missing)" in done.stdout
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "created" not in again.stdout


def test_every_hook_has_a_powershell_twin_with_the_same_constants() -> None:
    """Windows runs the .ps1 twins (azure.yaml `windows:` blocks, docs/platform.md P21): same steps, same values."""
    for posix in HOOKS.glob("*.sh"):
        twin = posix.with_suffix(".ps1")
        assert twin.is_file(), f"{posix.name} has no PowerShell twin"
        sh, ps1 = posix.read_text(), twin.read_text()
        for constant in re.findall(r"\"(2\d{3}-\d\d-\d\d|/model\.onnx|Storage Blob Data Contributor)\"", sh):
            assert constant in ps1, f"{twin.name} lacks {constant}"
        for step in re.findall(r'"\$here/([\w-]+)\.sh"', sh):
            assert f"$PSScriptRoot/{step}.ps1" in ps1, f"{twin.name} does not run {step}.ps1"
    steps = re.findall(r'"\$here/([\w-]+)\.sh"', (HOOKS / "postdeploy.sh").read_text())
    assert steps == ["keda-scale-rules", "publish-seed-model", "smoke", "eventgrid-subscription"]
    assert re.findall(r"\$PSScriptRoot/([\w-]+)\.ps1", (HOOKS / "postdeploy.ps1").read_text()) == steps


def test_in_azure_the_publisher_gets_a_data_role_on_the_models_container_only(
    azurite_connection: str, container: str, tmp_path: Path
) -> None:
    """Without a connection string (Azure): the signed-in user is granted Storage Blob Data Contributor
    scoped to the models container, before any publish is tried (here the account cannot be reached)."""
    done = run_hook(
        "publish-seed-model.sh", tmp_path, azurite_connection, container, ModelStorage="", SCORING_SEED_ATTEMPTS="1"
    )
    assert done.returncode == 1 and "could not be published" in done.stderr, done.stdout + done.stderr
    calls = az_calls(tmp_path)
    (grant,) = [c for c in calls if c.startswith("az role assignment create")]
    scope = f"/subscriptions/0/resourceGroups/rg-replay/providers/Microsoft.Storage/storageAccounts/streplay/blobServices/default/containers/{container}"
    assert f"--scope {scope} " in grant and "--role Storage Blob Data Contributor" in grant
    assert "--assignee-object-id 11111111-2222-3333-4444-555555555555 --assignee-principal-type User" in grant
