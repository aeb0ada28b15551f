"""The prediction log's container: the one the app writes its decision records to, kept
append-only by a WORM policy. Names the docs/platform.md rows it enforces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .contract import app_env
from .parsing import parse
from .redis_stores import _accessor, _value

STORAGE_MODULE = "modules/storage.bicep"
CONTAINER = "microsoft.storage/storageaccounts/blobservices/containers"
WORM = f"{CONTAINER}/immutabilitypolicies"
BLOB_SERVICE = "microsoft.storage/storageaccounts/blobservices"
# azure-mgmt-storage==21.2.1 v2023_05_01 BlobContainersOperations: `immutability_policy_name: Literal["default"]`
POLICY_NAME = "default"


def _body(resource: dict[str, Any]) -> dict[str, Any]:
    config = resource["config"]
    return config["config"] if "condition" in config and isinstance(config.get("config"), dict) else config


def _enabled(policy: Any, flag: str) -> bool:
    """Whether a policy object may be on (anything but an absent flag or a literal false)."""
    return isinstance(policy, dict) and flag in policy and policy[flag] is not False


def check_prediction_log(root: Path) -> list[str]:
    """The app writes its decision records to Blob (PREDICTION_LOG=blob), in the container that
    storage.bicep keeps under WORM: app.bicep's PREDICTION_LOG_CONTAINER is a parameter main.bicep
    passes from storage.bicep's output of that container's name; the container has a time-based
    retention policy (`default`, at least a day) with allowProtectedAppendWrites, which lets the
    writer create append blobs and append blocks while no blob can be overwritten or deleted (P43),
    and without allowProtectedAppendWritesAll (the two are mutually exclusive: P43); the account's
    blob service enables neither point-in-time restore nor last-access tracking, which immutable
    storage does not support (P43).
    """
    infra = root / "infra"
    env = app_env(root)
    findings: list[str] = []
    if env.get("PREDICTION_LOG") != "blob":
        findings.append(f"app.bicep: PREDICTION_LOG is {env.get('PREDICTION_LOG')!r}: the decisions go to no container")
    param = env.get("PREDICTION_LOG_CONTAINER")
    if not (isinstance(param, str) and param in parse(infra / "modules" / "app.bicep").get("parameters", {})):
        return [*findings, "app.bicep: PREDICTION_LOG_CONTAINER is not a parameter main.bicep passes the container to"]
    main = parse(infra / "main.bicep")
    modules = main.get("modules", {})
    passed = _accessor(modules.get("app", {}).get("config", {}).get("params", {}).get(param))
    source = modules.get(passed[0], {}) if len(passed) == 3 and passed[1] == "outputs" else {}
    if source.get("detail", {}).get("path") != STORAGE_MODULE:
        return [*findings, f"main.bicep: the app's {param} is not an output of {STORAGE_MODULE} ({passed})"]
    storage = parse(infra / STORAGE_MODULE)
    output = _accessor(storage.get("outputs", {}).get(passed[2], {}).get("value"))
    resources = storage.get("resources", {})
    symbol = output[0] if len(output) == 2 and output[1] == "name" else None
    if symbol not in resources or resources[symbol]["type"].lower() != CONTAINER:
        return [*findings, f"storage.bicep: output {passed[2]} is not a blob container's name ({output})"]
    policies = [_body(r) for r in resources.values() if r["type"].lower() == WORM and _body(r).get("parent") == symbol]
    if len(policies) != 1:
        return [
            *findings,
            f"storage.bicep: container {symbol} has {len(policies)} immutability policies, not one (P43)",
        ]
    policy = policies[0]
    props = policy.get("properties", {})
    if policy.get("name") != POLICY_NAME:
        findings.append(f"storage.bicep: {symbol}'s immutability policy is named {policy.get('name')!r}, not 'default'")
    days = _value(storage, props.get("immutabilityPeriodSinceCreationInDays"))
    if not (isinstance(days, int) and days >= 1):
        findings.append(f"storage.bicep: {symbol} is kept immutable for {days!r} days, not at least one (P43)")
    if props.get("allowProtectedAppendWrites") is not True:
        findings.append(f"storage.bicep: {symbol}'s policy refuses appends: the log's append blobs cannot grow (P43)")
    if props.get("allowProtectedAppendWritesAll") is True:
        findings.append(f"storage.bicep: {symbol}'s policy sets allowProtectedAppendWritesAll too (exclusive: P43)")
    services = [_body(r) for r in resources.values() if r["type"].lower() == BLOB_SERVICE]
    for service in services:
        service_props = service.get("properties", {})
        if _enabled(service_props.get("restorePolicy"), "enabled"):
            findings.append("storage.bicep: point-in-time restore is on; immutable storage is incompatible (P43)")
        if _enabled(service_props.get("lastAccessTimeTrackingPolicy"), "enable"):
            findings.append("storage.bicep: last-access tracking is on; immutable storage is incompatible (P43)")
    return findings
