"""Every Bicep file parses, and main.bicep wires every module that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import BICEP_FILES, INFRA, REPO, parse_bicep


def test_there_is_infra_to_check() -> None:
    assert (INFRA / "main.bicep") in BICEP_FILES
    assert len(BICEP_FILES) >= 10, BICEP_FILES


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: str(p.relative_to(INFRA)))
def test_bicep_file_parses(path: Path) -> None:
    tree = parse_bicep(path)
    assert tree.get("resources") or tree.get("modules"), f"{path.name} declares nothing"


def test_main_uses_every_module_and_each_exists() -> None:
    main = parse_bicep(INFRA / "main.bicep")
    used = {INFRA / m["detail"]["path"] for m in main["modules"].values()}
    for path in used:
        assert path.is_file(), f"main.bicep references missing module {path}"
    declared = set((INFRA / "modules").glob("*.bicep"))
    assert declared == used, f"modules not wired into main.bicep: {sorted(declared - used)}"


def test_module_params_passed_from_main_exist_in_the_module() -> None:
    main = parse_bicep(INFRA / "main.bicep")
    for name, module in main["modules"].items():
        config = module["config"]
        config = config.get("config", config) if "condition" in config else config
        target = parse_bicep(INFRA / module["detail"]["path"])
        unknown = set(config["params"]) - set(target["parameters"])
        assert not unknown, f"module {name} is passed unknown params {sorted(unknown)}"
        required = {p for p, spec in target["parameters"].items() if "default" not in spec}
        missing = required - set(config["params"])
        assert not missing, f"module {name} lacks required params {sorted(missing)}"


def test_parameter_file_names_real_parameters() -> None:
    main = parse_bicep(INFRA / "main.bicep")
    params = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    unknown = set(params) - set(main["parameters"])
    assert not unknown, f"main.parameters.json sets unknown params {sorted(unknown)}"


def test_azure_yaml_points_at_infra_dockerfile_and_hook() -> None:
    text = (REPO / "azure.yaml").read_text()
    assert re.search(r"^\s+path: infra$", text, re.M)
    assert re.search(r"^\s+module: main$", text, re.M)
    assert re.search(r"^\s+host: containerapp$", text, re.M)
    assert "path: ./Dockerfile" in text
    hooks = re.findall(r"run: (\S+)", text)
    assert hooks, "azure.yaml runs no hook"
    for hook in hooks:
        path = REPO / hook
        assert path.is_file(), f"hook {hook} is missing"
        assert path.stat().st_mode & 0o111, f"hook {hook} is not executable"


def test_service_tag_matches_azure_yaml_service() -> None:
    text = (REPO / "azure.yaml").read_text()
    services = re.search(r"^services:\n\s+(\w+):", text, re.M)
    assert services, "azure.yaml has no service"
    app = parse_bicep(INFRA / "modules" / "app.bicep")
    assert app["parameters"]["serviceName"]["default"] == services.group(1)


def test_dockerfile_uses_the_functions_python_base() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM mcr\.microsoft\.com/azure-functions/python:4-python3\.11\b", text, re.M)
    assert "AzureWebJobsScriptRoot=/home/site/wwwroot" in text


def test_azure_yaml_follows_the_azd_schema() -> None:
    # schemas/azure.yaml.json: Azure/azure-dev schemas/v1.0/azure.yaml.json at commit
    # ae35809f496491989273d0edefdeb70f245f399b (2026-08-21), vendored unchanged.
    import jsonschema
    import yaml

    schema = json.loads((Path(__file__).parent / "schemas" / "azure.yaml.json").read_text())
    doc = yaml.safe_load((REPO / "azure.yaml").read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft201909Validator(schema).iter_errors(doc)]
    assert not errors, errors
