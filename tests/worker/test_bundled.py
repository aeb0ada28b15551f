"""What the Python 3.11 worker would do, under each of its bundles (the 2024 one and the 2026 one
production runs since host 4.1049; docs/platform.md P37, P73): the bundle's azure-functions, protobuf
and grpcio first on the path of a 3.11 process that indexes the app, imports every module the app
loads at run time and serves one V2 gRPC call (tests/worker/bundled311.py). The mutations regenerate
the V2 stubs at a gencode level a bundle cannot load and watch the conformance name the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.worker.host import REPO

STUB_MODULE = "shared.adapters.oip.grpc_predict_v2_pb2"
PROTO = REPO / "shared" / "adapters" / "oip" / "proto" / "grpc_predict_v2.proto"


@dataclass(frozen=True)
class Bundle:
    """One release of the 3.11 worker's bundled packages, pinned in `requirements` and installed by the
    Makefile (`make worker-venvs`) into `folder`."""

    requirements: Path
    folder: Path

    def pins(self) -> dict[str, str]:
        lines = self.requirements.read_text().splitlines()
        return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


BUNDLE_2024 = Bundle(REPO / "requirements-worker311.txt", REPO / ".venv-worker311")
BUNDLE_2026 = Bundle(REPO / "requirements-worker311-2026.txt", REPO / ".venv-worker311-2026")
EACH_BUNDLE = pytest.mark.parametrize("bundle", [BUNDLE_2024, BUNDLE_2026], ids=["2024", "2026"])

# Why a stub with a `runtime_version` check does not load: protobuf 4.25 has no such module, and
# 5.29 refuses gencode newer than itself (https://protobuf.dev/support/cross-version-runtime-guarantee).
NO_RUNTIME_VERSION = "ImportError: cannot import name 'runtime_version' from 'google.protobuf'"
GENCODE_NEWER = (
    "VersionError: Detected incompatible Protobuf Gencode/Runtime versions when loading grpc_predict_v2.proto: "
    "gencode {level} runtime {runtime}"
)


def run(bundle: Bundle, app_dir: Path = REPO) -> dict[str, Any]:
    """bundled311.py's report, with `bundle` first on the path and then the app in `app_dir`."""
    assert (bundle.folder / ".installed").exists(), f"{bundle.folder.name} is not built: make worker-venvs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundle.folder), str(app_dir), str(REPO)])}
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "worker" / "bundled311.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def problems(report: dict[str, Any], bundle: Bundle) -> list[str]:
    """What the conformance finds wrong in one report; empty when the app runs under `bundle`."""
    pins = bundle.pins()
    found = [f"imported {name} {version}, the bundle pins {pins[name]}"
             for name, version in report["versions"].items() if version != pins[name]]  # fmt: skip
    if report["functions"] != 27:
        found.append(f"indexed {report['functions']} functions, not 27")
    found += report["refused"]
    found += [f"{module}: {error}" for module, error in report["failed"].items()]
    if not report["grpc_live"]:
        found.append(f"no V2 gRPC call served: {report['grpc_error']}")
    return found


def app_with_stubs_from(tmp_path: Path, tools: Path | None) -> tuple[Path, str]:
    """A copy of the app whose V2 stubs the grpcio-tools in `tools` (a --target folder; None: the dev
    venv's) regenerated, and the gencode level they were generated at."""
    app = tmp_path / "app"
    shutil.copytree(REPO / "shared", app / "shared", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "function_app.py", app)
    out = app / "shared" / "adapters" / "oip"
    env = {**os.environ, "PYTHONPATH": str(tools)} if tools else dict(os.environ)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    level = re.search(r"^# Protobuf Python Version: (\S+)$", (out / "grpc_predict_v2_pb2.py").read_text(), re.M)
    assert level, "the regenerated stub does not say its gencode level"
    return app, level[1]


@EACH_BUNDLE
def test_under_each_bundle_the_app_indexes_imports_and_serves_grpc(bundle: Bundle) -> None:
    report = run(bundle)
    assert problems(report, bundle) == []
    assert set(report["versions"]) == {"azure-functions", "protobuf", "grpcio"}


def test_the_v2_stubs_carry_no_runtime_version_check() -> None:
    """Gencode at the protobuf 4.25 level loads under both bundles and the pins; newer gencode
    first calls `runtime_version`, which 4.25 lacks (make stubs regenerates them)."""
    stub = (REPO / "shared" / "adapters" / "oip" / "grpc_predict_v2_pb2.py").read_text()
    assert "runtime_version" not in stub


@pytest.mark.parametrize(
    ("bundle", "reason"), [(BUNDLE_2024, NO_RUNTIME_VERSION), (BUNDLE_2026, GENCODE_NEWER)], ids=["2024", "2026"]
)
def test_stubs_at_a_gencode_level_newer_than_the_bundle_fail_the_conformance(
    bundle: Bundle, reason: str, tmp_path: Path
) -> None:
    app, level = app_with_stubs_from(tmp_path, tools=None)
    assert int(level.split(".")[0]) > 5, f"the dev venv's grpcio-tools made {level} gencode, not newer than 5.29"
    found = problems(run(bundle, app), bundle)
    why = reason.format(level=level, runtime=bundle.pins()["protobuf"])
    assert any(problem.startswith(f"{STUB_MODULE}: {why}") for problem in found), found
    assert any(problem.startswith("no V2 gRPC call served") for problem in found), found


@pytest.mark.parametrize(
    ("bundle", "reason"), [(BUNDLE_2026, None), (BUNDLE_2024, NO_RUNTIME_VERSION)], ids=["2026", "2024"]
)
def test_stubs_at_the_2026_gencode_level_load_under_2026_only(
    bundle: Bundle, reason: str | None, tmp_path: Path
) -> None:
    """The 2026 bundle's own grpcio-tools (1.70.0, protobuf 5.29 gencode) makes stubs the 2026 bundle loads
    and the 2024 one does not: were `make stubs` moved to it, 2024 would be the bundle that breaks."""
    assert (BUNDLE_2026.folder / ".installed").exists(), "the 2026 bundle is not built: make worker-venvs"
    app, level = app_with_stubs_from(tmp_path, tools=BUNDLE_2026.folder)
    assert level.startswith("5.29."), level
    found = problems(run(bundle, app), bundle)
    if reason is None:
        assert found == []
    else:
        assert any(problem.startswith(f"{STUB_MODULE}: {reason}") for problem in found), found


def test_a_pep_585_annotation_put_back_is_refused_as_the_311_worker_refuses_it(tmp_path: Path) -> None:
    source = (REPO / "function_app.py").read_text()
    (tmp_path / "function_app.py").write_text(source.replace("msgs: List[", "msgs: list["))
    refused = run(BUNDLE_2026, tmp_path)["refused"]
    assert refused and "payments: binding msgs has invalid non-type annotation" in refused[0]
