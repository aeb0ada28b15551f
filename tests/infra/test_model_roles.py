"""Least privilege for the runtime identity on storage: the real tree passes, and each way of
giving it back too much (or too little) is caught (CONVENTIONS rule 17, docs/platform.md P63)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checks.contract import check_roles
from checks.model_roles import check_model_roles
from conftest import REPO

STORAGE = "infra/modules/storage.bicep"

# (id, text in storage.bicep, replacement)
MUTATIONS = [
    (
        "models-writable",
        "roleDefinitions', blobDataReaderRoleId)",
        "roleDefinitions', blobDataContributorRoleId)",
    ),
    ("host-owner-on-the-account", "scope: hostKeysContainer", "scope: account"),
    ("owner-on-the-models", "scope: hostLeasesContainer", "scope: modelsContainer"),
    ("models-reader-lost", "scope: modelsContainer\n", "scope: predictionsContainer\n"),
    ("host-container-undeclared", "name: 'azure-webjobs-secrets'", "name: 'webjobs-secrets'"),
]


def test_the_runtime_identity_reads_models_and_writes_only_the_prediction_log() -> None:
    assert check_model_roles(REPO) == []
    assert check_roles(REPO) == []


@pytest.mark.parametrize(("text", "replacement"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_too_much_or_too_little_on_storage_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "infra", root / "infra")
    target = root / STORAGE
    source = target.read_text()
    assert source.count(text) == 1, f"mutation target {text!r} is not once in {STORAGE}: update MUTATIONS"
    assert check_model_roles(root) == []
    target.write_text(source.replace(text, replacement))
    assert check_model_roles(root), f"missed: {text!r} -> {replacement!r}"
