"""Imports run one way, every module imports alone, and the Functions path stays light.

The layers are drawn in shared/__init__.py's docstring (and docs/architecture.md's map); this test
holds the code to them. A module may import its own layer or any layer below, never above.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO / "shared"

LAYERS: list[set[str]] = [
    {"shared.settings", "shared.policies", "shared.setting", "shared.errors"},
    {"shared.domain"},
    {"shared.telemetry"},
    {"shared.runtime", "shared.stores"},
    {"shared.features"},
    {"shared.models"},
    {"shared.fleet", "shared.review"},
    {"shared.core"},
    {"shared.adapters", "shared.__main__"},
]
HEAVY = (
    "onnxruntime",
    "numpy",
    "redis",
    "azure.storage",
    "openai",
    "opentelemetry",
    "prometheus_client",
    "grpc",
    "google.protobuf",
    "uvicorn",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(module_name(p) for p in SHARED.rglob("*.py"))


def layer_of(module: str) -> int:
    for i, members in enumerate(LAYERS):
        if any(module == m or module.startswith(m + ".") for m in members):
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and to the map in shared/__init__.py")


def shared_imports(source: str, module: str) -> set[str]:
    """Every `shared.*` module that `source` imports, lazily or not (TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("shared"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shared"):
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{module}: relative import of {node.module} (use absolute imports)")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and str(arg.value).startswith("shared"):
                found.add(str(arg.value))
    return found


def upward_imports(module: str, source: str) -> list[str]:
    """The imports of `module` that go to a higher layer (package surfaces may re-export their own)."""
    if module == "shared":
        return sorted(shared_imports(source, module))  # the package itself sits above nothing: it imports nothing
    mine = layer_of(module)
    return sorted(i for i in shared_imports(source, module) if i != "shared" and layer_of(i) > mine)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_higher_layer(module: str) -> None:
    path = SHARED.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    assert upward_imports(module, path.read_text()) == []


def reexports(source: str) -> list[str]:
    """What a package's `__init__` imports: a surface that re-exports (eagerly or lazily) names it."""
    return sorted(
        ast.unparse(node) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import | ast.ImportFrom)
    ) + (["__getattr__"] if "__getattr__" in source else [])


@pytest.mark.parametrize("package", sorted(str(p.relative_to(REPO)) for p in SHARED.rglob("__init__.py")))
def test_no_package_re_exports_what_its_modules_define(package: str) -> None:
    """Internal code imports from the defining module; a package is its docstring (the map of its modules)."""
    assert reexports((REPO / package).read_text()) == []


def test_the_re_export_check_catches_a_surface() -> None:
    assert reexports('"""Doc."""\nfrom shared.stores.cache.tiered import TieredCache\n') == [
        "from shared.stores.cache.tiered import TieredCache"
    ]
    assert reexports("def __getattr__(name):\n    return name\n") == ["__getattr__"]


def test_the_layer_check_catches_an_upward_import() -> None:
    """Mutation: a feature mapping that reached for a served version (a cycle) must fail."""
    assert upward_imports("shared.features.mapping", "from shared.models.served import LoadedModel\n") == [
        "shared.models.served"
    ]
    assert upward_imports(
        "shared.stores.cache.tiered", "def f():\n    from shared.core.service import ScoringService\n"
    ) == ["shared.core.service"]
    assert upward_imports("shared.errors", "import shared.settings\n") == []  # same layer
    assert upward_imports("shared.errors", "from shared.telemetry.logs import rejections\n") == [
        "shared.telemetry.logs"
    ]  # the error tree sits below the logs: answered errors are logged by the adapters


def drawn_layers(text: str) -> list[set[str]]:
    """The layer lines of a map: `    a, b, c      what they are`, in order, bottom first."""
    rows = re.findall(r"^ {4}((?:[a-z_]+, )*[a-z_]+) {2,}\S", text, re.M)
    return [{"shared." + n for n in row.split(", ")} for row in rows]


@pytest.mark.parametrize("document", ["shared/__init__.py", "docs/architecture.md"])
def test_the_maps_draw_the_layers_the_code_follows(document: str) -> None:
    assert drawn_layers((REPO / document).read_text()) == LAYERS


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_every_module_imports_alone() -> None:
    """Each module in a clean `shared` (no other of our modules loaded): an import cycle fails here."""
    code = f"""
import importlib, json, sys, traceback
failed = {{}}
for name in {MODULES!r}:
    for loaded in [m for m in sys.modules if m == "shared" or m.startswith("shared.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""
    assert json.loads(run_python(code)) == {}


def test_importing_function_app_loads_no_heavy_module() -> None:
    code = """
import json, sys, time
started = time.perf_counter()
import function_app
elapsed = time.perf_counter() - started
print(json.dumps({"heavy": [m for m in sys.modules if m.split(".")[0] in ("onnxruntime", "numpy", "redis", "openai",
                             "opentelemetry", "prometheus_client", "grpc", "uvicorn") or m.startswith(("azure.storage", "google.protobuf"))], "s": elapsed}))
"""
    result = json.loads(run_python(code))
    assert result["heavy"] == [], f"function_app imports {sorted(set(m.split('.')[0] for m in result['heavy']))}"


def map_names(readme: str) -> set[str]:
    """Every module or package name the map of the tree (docs/architecture.md) mentions (`x.py`, `x/`, `x` in a list)."""
    block = readme.split("# How it fits together", 1)[1].split("```", 2)[1]
    return set(re.findall(r"([a-z_0-9]+)(?:\.py|/)", block)) | set(re.findall(r"(?:·|:|/)\s+([a-z_0-9]+)\b", block))


def unmapped(readme: str) -> list[str]:
    skip = {"__init__", "__main__", "grpc_predict_v2_pb2"}
    return sorted({p.stem for p in SHARED.rglob("*.py")} - skip - map_names(readme))


def test_the_readme_map_names_every_module_of_the_tree() -> None:
    readme = (REPO / "docs" / "architecture.md").read_text()
    assert unmapped(readme) == []
    assert unmapped(readme.replace("routes.py", "table.py")) == ["routes"]  # mutation: a module the map lost


SERVED_KINDS = {"LoadedModel", "Ensemble"}


def served_kind_checks(source: str) -> list[str]:
    """Every `isinstance(x, LoadedModel | Ensemble ...)` in `source`: outside the models layer, a served
    name is `Served` (shared/models/served.py), a protocol both kinds satisfy."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if names & SERVED_KINDS:
                found.append(ast.unparse(node))
    return found


def test_only_the_models_layer_tells_a_model_from_an_ensemble() -> None:
    outside = [p for p in SHARED.rglob("*.py") if "models" not in p.relative_to(SHARED).parts]
    assert {
        str(p.relative_to(REPO)): served_kind_checks(p.read_text())
        for p in outside
        if served_kind_checks(p.read_text())
    } == {}
    assert served_kind_checks("if isinstance(loaded, LoadedModel):\n    pass\n") == ["isinstance(loaded, LoadedModel)"]


def core_reaches(source: str) -> list[str]:
    """Where an adapter reads the core's settings or runs its jobs itself, past its methods and `limits`."""
    return re.findall(r"\b(?:service|core)\.(?:settings|background)\b", source)


def test_adapters_read_the_core_through_its_methods_and_limits_only() -> None:
    adapters = sorted((SHARED / "adapters").rglob("*.py"))
    assert {
        str(p.relative_to(REPO)): core_reaches(p.read_text()) for p in adapters if core_reaches(p.read_text())
    } == {}
    assert core_reaches("port = service.settings.grpc_port\n") == ["service.settings"]  # mutation: a reach is seen
