"""The prediction log ends: a lifecycle rule deletes each log blob once its WORM retention has run
out, and none earlier (docs/platform.md P43, P68). Checked on storage.bicep and on copies broken on
purpose (rule 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import INFRA, Module

POLICY = "Microsoft.Storage/storageAccounts/managementPolicies"


def _days(value: Any) -> tuple[str, int] | None:
    """`predictionRetentionDays + N` as (the parameter, N); anything else None."""
    if isinstance(value, str):
        return (value, 0)
    operator = value.get("operator", {}) if isinstance(value, dict) else {}
    operands = operator.get("operands", {})
    if operator.get("type") == "add" and isinstance(operands.get("operand_2"), int):
        return (operands.get("operand_1"), operands["operand_2"])
    return None


def retention_findings(storage_bicep: Path) -> list[str]:
    module = Module(storage_bicep)
    container = module.params["predictionsContainerName"]["default"]
    rules = [r for p in module.resources(POLICY) for r in p["properties"]["policy"]["rules"]]
    ends = [
        r for r in rules
        if r.get("enabled", True)
        and {f"{container}/", "${predictionsContainerName}/"} & set(r["definition"]["filters"].get("prefixMatch", []))
    ]  # fmt: skip
    if len(ends) != 1:
        return [f"expected one enabled lifecycle rule on the {container!r} container, found {len(ends)}"]
    (rule,) = ends
    findings = []
    if rule["definition"]["filters"].get("blobTypes") != ["appendBlob"]:
        findings.append("the rule must match the log's append blobs")
    delete = rule["definition"]["actions"].get("baseBlob", {}).get("delete", {})
    days = _days(delete.get("daysAfterModificationGreaterThan"))
    if days is None or days[0] != "predictionRetentionDays" or not 0 <= days[1] <= 7:
        findings.append(f"delete after predictionRetentionDays (+ at most a week), got {days}")
    return findings


def test_the_log_is_deleted_after_its_retention() -> None:
    assert retention_findings(INFRA / "modules" / "storage.bicep") == []


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("daysAfterModificationGreaterThan: predictionRetentionDays + 1", "daysAfterModificationGreaterThan: 3650"),
        ("daysAfterModificationGreaterThan: predictionRetentionDays + 1",
         "daysAfterModificationGreaterThan: predictionRetentionDays + 365"),
        ("'${predictionsContainerName}/'", "'models/'"),
        ("'appendBlob'", "'blockBlob'"),
        ("          enabled: true\n          type: 'Lifecycle'", "          enabled: false\n          type: 'Lifecycle'"),
    ],
)  # fmt: skip
def test_each_broken_retention_rule_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = (INFRA / "modules" / "storage.bicep").read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "storage.bicep"
    broken.write_text(source.replace(text, replacement))
    assert retention_findings(broken), f"not caught: {replacement}"
