"""Imports run one way, every module imports alone, and the Functions path stays light.

The layers are drawn in shared/__init__.py's docstring (and the README's map); this test
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
    {"shared.settings", "shared.errors", "shared.exports", "shared.telemetry"},
    {"shared.events"},
    {"shared.cache", "shared.control", "shared.batching", "shared.background", "shared.deadlines", "shared.admission"},
    {"shared.models"},
    {"shared.features", "shared.feature_store", "shared.feast_store"},
    {
        "shared.serving",
        "shared.registry",
        "shared.decision",
        "shared.rollout",
        "shared.review",
        "shared.signature",
        "shared.ensembles",
    },
    {"shared.service", "shared.build"},
    {
        "shared.http",
        "shared.openapi",
        "shared.triggers",
        "shared.asgi",
        "shared.__main__",
        "shared.local_server",
        "shared.queue",
        "shared.oip",
    },
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
        return []  # the package's lazy public surface names every layer
    mine = layer_of(module)
    return sorted(i for i in shared_imports(source, module) if i != "shared" and layer_of(i) > mine)


@pytest.mark.parametrize("module", MODULES)
def test_no_module_imports_a_higher_layer(module: str) -> None:
    path = SHARED.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    assert upward_imports(module, path.read_text()) == []


def test_the_layer_check_catches_an_upward_import() -> None:
    """Mutation: the cycle the first wave had (models importing features) must fail."""
    assert upward_imports("shared.models.registry", "from shared.features import FeatureMapper\n") == [
        "shared.features"
    ]
    assert upward_imports("shared.cache.tiered", "def f():\n    from shared.service import ScoringService\n") == [
        "shared.service"
    ]
    assert upward_imports("shared.errors", "import shared.settings\n") == []  # same layer


def drawn_layers(text: str) -> list[set[str]]:
    """The layer lines of a map: `    a, b, c      what they are`, in order, bottom first."""
    rows = re.findall(r"^ {4}((?:[a-z_]+, )*[a-z_]+) {2,}\S", text, re.M)
    return [{"shared." + n for n in row.split(", ")} for row in rows]


@pytest.mark.parametrize("document", ["shared/__init__.py", "README.md"])
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
