"""Issue 42's settings on the Container App: the host's body limit matches the app's largest cap,
and the keys the app reads (GRPC_KEYS, PREDICTION_LOG_HASH_KEY) are never a value written in the
template: the hash key is a secret reference (generated per environment: tests/infra/test_no_secrets.py),
never empty (unkeyed hashes of event ids can be reversed by guessing). Each check runs on the real app.bicep and on a copy broken on purpose (rule 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import INFRA, Module

BATCH_FACTOR = 16  # a batch or a V2 request may carry MAX_BODY_BYTES x 16 (shared/adapters/http/app.py)
KEYS = ("GRPC_KEYS", "PREDICTION_LOG_HASH_KEY")
REQUIRED = ("PREDICTION_LOG_HASH_KEY",)  # a secret reference; GRPC_KEYS may stay empty (every call refused)


def env_of(module: Module) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for var in module.variables.values():
        value = var["value"]
        if isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value):
            env.update({i["name"]: i["value"] if "value" in i else {"secretRef": i.get("secretRef")} for i in value})
    return env


def edge_findings(app_bicep: Path) -> list[str]:
    env = env_of(Module(app_bicep))
    findings = []
    limit, cap = env.get("FUNCTIONS_REQUEST_BODY_SIZE_LIMIT"), env.get("MAX_BODY_BYTES")
    if not (isinstance(limit, str) and limit.isdigit() and isinstance(cap, str) and cap.isdigit()):
        findings.append(f"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT {limit!r} and MAX_BODY_BYTES {cap!r}: literal byte counts")
    elif int(limit) != int(cap) * BATCH_FACTOR:
        findings.append(f"FUNCTIONS_REQUEST_BODY_SIZE_LIMIT {limit} is not MAX_BODY_BYTES x {BATCH_FACTOR}")
    for key in KEYS:
        if key not in env:
            findings.append(f"{key} is not set")
        elif isinstance(env[key], dict) and env[key].get("secretRef"):
            continue
        elif env[key] not in ("", None):
            findings.append(f"{key} is a value written in the template: {env[key]!r}")
        elif key in REQUIRED:
            findings.append(f"{key} is empty: not a secret reference")
    if env.get("GRPC_MAX_CONCURRENT") in (None, "", "0"):
        findings.append("GRPC_MAX_CONCURRENT is not a cap")
    return findings


def test_the_app_sets_the_edges() -> None:
    assert edge_findings(INFRA / "modules" / "app.bicep") == []


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("{ name: 'FUNCTIONS_REQUEST_BODY_SIZE_LIMIT', value: '1048576' }", ""),
        ("{ name: 'FUNCTIONS_REQUEST_BODY_SIZE_LIMIT', value: '1048576' }",
         "{ name: 'FUNCTIONS_REQUEST_BODY_SIZE_LIMIT', value: '104857600' }"),
        ("{ name: 'MAX_BODY_BYTES', value: '65536' }", "{ name: 'MAX_BODY_BYTES', value: '131072' }"),
        ("{ name: 'GRPC_KEYS', value: '' }", "{ name: 'GRPC_KEYS', value: 'k3y-in-the-template-0123456789' }"),
        ("{ name: 'PREDICTION_LOG_HASH_KEY', secretRef: 'prediction-log-hash-key' }",
         "{ name: 'PREDICTION_LOG_HASH_KEY', value: 'pepper' }"),
        ("{ name: 'PREDICTION_LOG_HASH_KEY', secretRef: 'prediction-log-hash-key' }",
         "{ name: 'PREDICTION_LOG_HASH_KEY', value: '' }"),
        ("{ name: 'GRPC_MAX_CONCURRENT', value: '64' }", "{ name: 'GRPC_MAX_CONCURRENT', value: '0' }"),
    ],
)  # fmt: skip
def test_each_broken_edge_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = (INFRA / "modules" / "app.bicep").read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "app.bicep"
    broken.write_text(source.replace(text, replacement))
    assert edge_findings(broken), f"not caught: {replacement or 'removed'}"
