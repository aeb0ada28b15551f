"""The host's gRPC message types (`AzureFunctionsRpcMessages`, FunctionRpc.proto) from PyPI.

`azure-functions-runtime-v1` (pinned in requirements-worker.txt) ships them, generated, as a
top-level `tests/protos` package, a name this repository's own `tests` package shadows; so
they are loaded here from that folder under the name `host_protos`. Both sides use them: the
stand-in host (tests/worker/host.py, any interpreter with protobuf and grpcio) and the worker
stand-in (tests/worker/proxy.py, inside the conformance venv).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["WORKER_VENV", "load", "protos_dir", "worker_python"]

REPO = Path(__file__).resolve().parents[2]
WORKER_VENV = REPO / ".venv-worker"
NAME = "host_protos"


def worker_python() -> Path:
    return WORKER_VENV / "bin" / "python"


def protos_dir(venv: Path = WORKER_VENV) -> Path:
    """`tests/protos` inside the conformance venv's site-packages."""
    found = sorted(venv.glob("lib/python3*/site-packages/tests/protos/FunctionRpc_pb2.py"))
    if not found:
        raise FileNotFoundError(f"no host message types under {venv} (make {venv.name}/.installed)")
    return found[-1].parent


def load(folder: Path | None = None) -> ModuleType:
    """The generated package (StreamingMessage, InvocationRequest, ... and FunctionRpcStub)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    folder = folder or protos_dir()
    spec = importlib.util.spec_from_file_location(
        NAME, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module
