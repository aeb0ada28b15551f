"""Offline checks of infra/ (and host.json, function_app.py) as plain functions.

Each check takes the repository root, or a scratch copy of it, and returns findings (strings);
the tests assert the real tree has none and tests/infra/test_mutations.py asserts that each
deliberate mistake yields some.
"""

from __future__ import annotations

from pathlib import Path

from .arm_models import check_resource
from .bicep_lang import check_language
from .contract import check_function_app, check_lock_budget, check_logging_feeds_alerts, check_metrics, check_roles
from .parsing import parse

__all__ = ["check_schemas", "run_all"]


def check_schemas(root: Path) -> list[str]:
    """API versions and resource bodies against the azure-mgmt-* REST models."""
    findings: list[str] = []
    for path in sorted((root / "infra").rglob("*.bicep")):
        tree = parse(path)
        symbols = {name: var["value"] for name, var in tree.get("variables", {}).items()}
        symbols.update({name: None for name in tree.get("parameters", {})})
        for name, resource in tree.get("resources", {}).items():
            findings += check_resource(path.name, name, resource, symbols)
    return findings


def run_all(root: Path, setting_names: tuple[str, ...], trigger_queue: str) -> dict[str, list[str]]:
    """Every check over `root`: {check name: findings}."""
    return {
        "schemas": check_schemas(root),
        "language": check_language(root / "infra"),
        "roles": check_roles(root),
        "metrics": check_metrics(root),
        "logging": check_logging_feeds_alerts(root),
        "locks": check_lock_budget(root, trigger_queue),
        "function_app": check_function_app(root, setting_names),
    }
