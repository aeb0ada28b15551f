"""The floor `python -m bench.worker` measures the app against: the app's functions, bodies emptied.

A floor that declared other bindings (another data type, cardinality or route) would measure
another conversion, and every ratio in docs/capacity.md would compare unlike things.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FLOOR = REPO / "bench" / "worker_floor" / "function_app.py"
MEASURED = ("health", "score", "score_batch", "payments")


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def declared(module: ModuleType) -> dict[str, Any]:
    """Each measured function's bindings (as the worker indexes them) and its parameters' annotations."""
    found = {}
    for function in module.app.get_functions():
        name = function.get_function_name()
        if name in MEASURED:
            bindings = sorted(json.dumps(json.loads(b), sort_keys=True) for b in function.get_raw_bindings())
            signature = inspect.signature(function.get_user_function())
            found[name] = (bindings, [str(p.annotation) for p in signature.parameters.values()])
    return found


def test_the_floor_declares_what_the_app_declares_for_every_measured_function() -> None:
    app = declared(load(REPO / "function_app.py", "app_under_test"))
    floor = declared(load(FLOOR, "floor_under_test"))
    assert set(app) == set(MEASURED)
    assert floor == app


def test_a_floor_binding_that_differs_is_caught(tmp_path: Path) -> None:
    """Mutation: the floor's queue trigger without `dataType: binary` (the host would send text)."""
    changed = tmp_path / "function_app.py"
    changed.write_text(FLOOR.read_text().replace("    data_type=func.DataType.BINARY,\n", ""))
    floor = declared(load(changed, "floor_mutated"))
    app = declared(load(REPO / "function_app.py", "app_under_test"))
    assert floor != app
    assert {name for name in MEASURED if floor[name] != app[name]} == {"payments"}
