"""The runtime identity's blob roles: it reads models, writes only the prediction log, and never
holds a blob role on the whole account that stores the Functions host's keys (docs/platform.md P63).

check_roles (contract.py) holds each identity to its (role, scope type) pairs; this check says
which containers: the role types alone cannot tell the models container from the host's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .contract import _body, _var_text
from .parsing import parse
from .tables import BUILT_IN_ROLES

STORAGE_MODULE = "modules/storage.bicep"
CONTAINER = "microsoft.storage/storageaccounts/blobservices/containers"
ROLE_ASSIGNMENT = "microsoft.authorization/roleassignments"
# P63: the host's own blobs: leases and blob-trigger receipts (azure-webjobs-hosts), keys (azure-webjobs-secrets)
HOST_CONTAINERS = frozenset({"azure-webjobs-hosts", "azure-webjobs-secrets"})
OWNER, CONTRIBUTOR, READER = "Storage Blob Data Owner", "Storage Blob Data Contributor", "Storage Blob Data Reader"
BLOB_ROLES = frozenset({OWNER, CONTRIBUTOR, READER})


def _role(tree: dict[str, Any], props: dict[str, Any]) -> str:
    ref = props.get("roleDefinitionId")
    fn = ref.get("function", {}) if isinstance(ref, dict) else {}
    guid = _var_text(tree, fn.get("parameters", {}).get("resource_name_1"))
    return BUILT_IN_ROLES.get(guid, (f"<{guid}>", ""))[0] if isinstance(guid, str) else "<unknown>"


def _output_symbol(tree: dict[str, Any], output: str) -> str | None:
    value = tree.get("outputs", {}).get(output, {}).get("value")
    operands = value.get("operator", {}).get("operands", {}) if isinstance(value, dict) else {}
    return operands.get("operand_1") if operands.get("operand_2") == "name" else None


def app_blob_grants(tree: dict[str, Any]) -> dict[str, set[str]]:
    """Scope symbol -> the blob roles the runtime identity (`appPrincipalId`) holds on it."""
    grants: dict[str, set[str]] = {}
    for res in tree.get("resources", {}).values():
        if res["type"].lower() != ROLE_ASSIGNMENT:
            continue
        body = _body(res)
        props = body.get("properties", {})
        role = _role(tree, props)
        if props.get("principalId") == "appPrincipalId" and role in BLOB_ROLES:
            grants.setdefault(str(body.get("scope", "<resource group>")), set()).add(role)
    return grants


def check_model_roles(root: Path) -> list[str]:
    """The runtime identity holds Blob Data Reader (only) on the models container, Blob Data
    Contributor (only) on the prediction log's, Blob Data Owner on the host's two containers and no
    blob role on anything else: not on the account (P63), so a replica can neither publish nor
    overwrite a model (docs/models.md)."""
    tree = parse(root / "infra" / STORAGE_MODULE)
    resources = tree.get("resources", {})
    containers = {s: _body(r) for s, r in resources.items() if r["type"].lower() == CONTAINER}
    models, predictions = _output_symbol(tree, "modelsContainerName"), _output_symbol(tree, "predictionsContainerName")
    host = {s for s, body in containers.items() if _var_text(tree, body.get("name")) in HOST_CONTAINERS}
    if models not in containers or predictions not in containers:
        return [f"storage.bicep: the models ({models}) or predictions ({predictions}) output is no container's name"]
    want = {models: {READER}, predictions: {CONTRIBUTOR}, **{s: {OWNER} for s in host}}
    findings: list[str] = []
    if len(host) != len(HOST_CONTAINERS):
        findings.append(f"storage.bicep: declares {len(host)} of the host's containers {sorted(HOST_CONTAINERS)}")
    grants = app_blob_grants(tree)
    for scope, roles in sorted(grants.items()):
        kind = resources.get(scope, {}).get("type", "<unknown>")
        if scope not in containers:
            findings.append(
                f"storage.bicep: the runtime identity holds {sorted(roles)} on {scope} ({kind}), not a container"
            )
        elif roles != want.get(scope, set()):
            findings.append(
                f"storage.bicep: the runtime identity holds {sorted(roles)} on {scope}, not {sorted(want.get(scope, set()))}"
            )
    for scope, roles in sorted(want.items()):
        if scope not in grants:
            findings.append(f"storage.bicep: the runtime identity lacks {sorted(roles)} on {scope}")
    return findings
