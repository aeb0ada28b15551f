"""Shared fixtures for the offline infrastructure checks.

Everything here is read from files: the Bicep modules (parsed with pycep, the parser
checkov itself uses), shared/settings.py (imported: it needs only the standard library,
so this venv needs none of the app's packages) and the azd parameter file.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
from checks import contract
from checks.parsing import parse

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
BICEP_FILES = sorted(INFRA.rglob("*.bicep"))


def parse_bicep(path: Path) -> dict[str, Any]:
    """Parse one Bicep file; any syntax error raises (cached by content: checks/parsing.py)."""
    return parse(path)


def app_setting_names() -> tuple[str, ...]:
    """The app-setting names the code reads: the ONE source for every infra check.

    Derived from the declarations in shared/settings.py, which imports only the standard
    library (and shared.errors), so this venv imports it as it is: no restated list.
    """
    return tuple(_settings_module().APP_SETTING_NAMES)


def local_setting_names() -> tuple[str, ...]:
    """Settings only a local run reads (never set on the Container App)."""
    return tuple(_settings_module().LOCAL_SETTING_NAMES)


def _settings_module() -> Any:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("shared.settings")


TRIGGER_QUEUE = "payments"  # function_app.py `payments`; tests/infra/checks re-read it with ast


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show the mutation score in every run (with or without -s)."""
    from test_mutations import SCORE

    if SCORE["total"]:
        terminalreporter.write_line(f"mutations caught {SCORE['caught']}/{SCORE['total']}")


class Module:
    """One parsed Bicep file with helpers to look things up by resource type."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = parse_bicep(path)

    @property
    def params(self) -> dict[str, Any]:
        return self.tree.get("parameters", {})

    @property
    def variables(self) -> dict[str, Any]:
        return self.tree.get("variables", {})

    def resources(self, type_: str) -> list[dict[str, Any]]:
        """Configs of every resource of `type_` (case-insensitive), loops unwrapped."""
        found = []
        for res in self.tree.get("resources", {}).values():
            if res["type"].lower() == type_.lower():
                config = res["config"]
                # Loops (`[for ...]`) and conditions (`= if (...)`) wrap the body in "config".
                while isinstance(config.get("config"), dict) and ("loop_type" in config or "condition" in config):
                    config = config["config"]
                found.append(config)
        return found

    def resource(self, type_: str) -> dict[str, Any]:
        found = self.resources(type_)
        assert len(found) == 1, f"{self.path.name}: expected one {type_}, found {len(found)}"
        return found[0]

    def var(self, name: str) -> Any:
        assert name in self.variables, f"{self.path.name}: no variable {name!r}"
        return self.variables[name]["value"]

    def resolve(self, value: Any) -> Any:
        """A bare identifier naming a parameter or variable resolves to its default/value."""
        if isinstance(value, str) and value in self.params:
            assert "default" in self.params[value], f"{self.path.name}: param {value} has no default"
            return self.params[value]["default"]
        if isinstance(value, str) and value in self.variables:
            return self.variables[value]["value"]
        return value

    def param_min(self, name: str) -> int | None:
        for deco in self.params[name].get("decorators", []):
            if deco["type"] == "min_value":
                return int(deco["argument"])
        return None


@pytest.fixture(scope="session")
def modules() -> dict[str, Module]:
    """Every Bicep file under infra/, keyed by its stem (`main`, `app`, `redis`, ...)."""
    return {path.stem: Module(path) for path in BICEP_FILES}


@pytest.fixture(scope="session")
def app(modules: dict[str, Module]) -> Module:
    return modules["app"]


@pytest.fixture(scope="session")
def container_app(app: Module) -> dict[str, Any]:
    return app.resource("Microsoft.App/containerApps")


# An env entry: a value, or a reference to one of the app's secrets (`{"secretRef": name}` in app_env).
ENV_ITEM = ({"name", "value"}, {"name", "secretRef"})


@pytest.fixture(scope="session")
def app_env(app: Module) -> dict[str, Any]:
    """Every env var the app module can set: name -> value (parsed expression)."""
    env: dict[str, Any] = {}
    for var_name, var in app.variables.items():
        value = var["value"]
        if (
            isinstance(value, list)
            and value
            and all(isinstance(i, dict) and set(i) in ENV_ITEM for i in value)
        ):
            for item in value:
                assert item["name"] not in env, f"{item['name']} set twice (in {var_name})"
                env[item["name"]] = item.get("value", {"secretRef": item.get("secretRef")})
    assert env, "no env var lists found in infra/modules/app.bicep"
    return env


def function_app_bindings() -> dict[str, dict[str, dict[str, Any]]]:
    """Decorators of each function in function_app.py: {function: {decorator: kwargs}}.

    The first use of each decorator; read with `ast` by the checker's own reader
    (checks.contract.function_app_bindings, which keeps every use).
    """
    return {
        function: {decorator: uses[0] for decorator, uses in decorators.items()}
        for function, decorators in contract.function_app_bindings(REPO).items()
    }


def trigger(decorator: str, function: str | None = None) -> tuple[str, dict[str, Any]]:
    """(function name, kwargs) of the one function carrying `decorator` (named `function`, where several do)."""
    found = [
        (fn, decos[decorator])
        for fn, decos in function_app_bindings().items()
        if decorator in decos and function in (None, fn)
    ]
    assert len(found) == 1, f"expected one function with @app.{decorator} in function_app.py, found {found}"
    return found[0]
