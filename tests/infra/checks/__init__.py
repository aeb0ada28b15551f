"""Offline checks of infra/ (and host.json, function_app.py) as plain functions.

Each check takes the repository root, or a scratch copy of it, and returns findings (strings);
the tests assert the real tree has none and tests/infra/test_mutations.py asserts that each
deliberate mistake yields some.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .arm_models import Walker, check_resource, fields, models_module
from .bicep_lang import check_language
from .contract import (
    check_admission,
    check_app_metrics,
    check_function_app,
    check_lock_budget,
    check_logging_feeds_alerts,
    check_metrics,
    check_override_api_version,
    check_roles,
    rule_list,
)
from .grpc_ingress import check_grpc_ingress
from .parsing import parse
from .platform import (
    check_extra_ports_observed,
    check_gpu_build,
    check_probes,
    check_profile_moves,
    check_windows_hooks,
)
from .prediction_log import check_prediction_log
from .redis_stores import check_redis_stores
from .sale_rules import check_sale_rules
from .tables import KEDA_METADATA, OPERATION_GROUPS, PATCH_BODIES, RESOURCE_MODELS

__all__ = ["CHECKS", "check_schemas", "run_all"]


def check_schemas(root: Path) -> list[str]:
    """API versions and resource bodies against the azure-mgmt-* REST models (P24), and the
    KEDA metadata of each scale rule against the scaler's documented keys (P23, P28)."""
    findings: list[str] = []
    for path in sorted((root / "infra").rglob("*.bicep")):
        tree = parse(path)
        symbols = {name: var["value"] for name, var in tree.get("variables", {}).items()}
        # pycep gives identifiers and string literals alike as str: every name the file
        # declares is a symbol (params, resources, modules, loop variables), the rest literals.
        symbols.update({name: None for name in tree.get("parameters", {})})
        symbols.update({name: None for section in ("resources", "modules") for name in tree.get(section, {})})
        symbols.update({name: None for name in _loop_names(tree)})
        for name, resource in tree.get("resources", {}).items():
            findings += check_resource(path.name, name, resource, symbols)
        findings += _patch_bodies(path, tree, symbols)
    return findings


def _loop_names(node: object) -> set[str]:
    names: set[str] = set()
    if isinstance(node, dict):
        detail = node.get("loop_type", {}).get("detail", {}) if isinstance(node.get("loop_type"), dict) else {}
        names |= {detail[k] for k in ("item_name", "index_name") if isinstance(detail.get(k), str)}
        for value in node.values():
            names |= _loop_names(value)
    elif isinstance(node, list):
        for value in node:
            names |= _loop_names(value)
    return names


def _patch_bodies(path: Path, tree: dict, symbols: dict) -> list[str]:
    """Outputs a hook sends as a PATCH body: checked like a resource body, plus KEDA metadata."""
    findings: list[str] = []
    for (file, output), (type_, model) in PATCH_BODIES.items():
        if file != path.name:
            continue
        if output not in tree.get("outputs", {}):
            findings.append(f"{file}: output {output} (a PATCH body) is missing")
            continue
        versions = {r["api_version"] for r in tree["resources"].values() if r["type"].lower() == type_}
        package = RESOURCE_MODELS[type_][0]
        for version in sorted(versions):
            models = models_module(package, version, OPERATION_GROUPS.get(type_)) if package else None
            if models is None:
                continue  # the resource's own check reports the version
            walker = Walker(models, f"{file}: output {output} ({model}@{version})", symbols)
            walker.object(tree["outputs"][output]["value"], fields(models, model), output, model)
            findings += walker.findings
        findings += _keda_metadata(file, tree, tree["outputs"][output]["value"])
    return findings


def _keda_metadata(file: str, tree: dict, scale: dict) -> list[str]:
    findings = []
    for rule in rule_list(tree, scale.get("rules")):
        for kind, body in rule.items():
            scaler = body.get("type", kind) if isinstance(body, dict) else None
            metadata = body.get("metadata") if isinstance(body, dict) else None
            if not isinstance(metadata, dict):
                continue
            allowed = KEDA_METADATA.get(scaler)
            if allowed is None:
                findings.append(f"{file}: scale rule {rule.get('name')}: no KEDA_METADATA for scaler {scaler!r}")
                continue
            for key in metadata:
                if key.strip("'") not in allowed:
                    findings.append(f"{file}: scale rule {rule.get('name')}: {scaler} has no metadata {key!r}")
    return findings


# Every check, by the name the mutation tests use: each function's docstring cites the
# docs/platform.md rows it enforces (tests/infra/test_checks.py holds them to it).
CHECKS: dict[str, Callable[..., list[str]]] = {
    "schema": check_schemas,
    "language": check_language,
    "roles": check_roles,
    "metrics": check_metrics,
    "app_metrics": check_app_metrics,
    "logging": check_logging_feeds_alerts,
    "locks": check_lock_budget,
    "admission": check_admission,
    "function_app": check_function_app,
    "override_version": check_override_api_version,
    "grpc_ingress": check_grpc_ingress,
    "probes": check_probes,
    "extra_ports": check_extra_ports_observed,
    "gpu_build": check_gpu_build,
    "profile_moves": check_profile_moves,
    "windows_hooks": check_windows_hooks,
    "redis_stores": check_redis_stores,
    "prediction_log": check_prediction_log,
    "sale_rules": check_sale_rules,
}


def run_all(root: Path, setting_names: tuple[str, ...], trigger_queue: str) -> dict[str, list[str]]:
    """Every check over `root`: {check name: findings}."""
    special: dict[str, Callable[[], list[str]]] = {
        "language": lambda: check_language(root / "infra"),
        "locks": lambda: check_lock_budget(root, trigger_queue),
        "function_app": lambda: check_function_app(root, setting_names),
    }
    return {name: special[name]() if name in special else check(root) for name, check in CHECKS.items()}
