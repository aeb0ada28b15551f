"""What the Python 3.11 worker would do: its bundled azure-functions, protobuf and grpcio first on
the path of a 3.11 process that indexes the app, imports every module the app loads at run time
and serves one V2 gRPC call (tests/worker/bundled311.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.worker.host import REPO

BUNDLE = REPO / ".venv-worker311"


def bundled() -> dict[str, str]:
    lines = (REPO / "requirements-worker311.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def run(app_dir: Path = REPO) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BUNDLE), str(app_dir), str(REPO)])}
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "worker" / "bundled311.py")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_under_the_bundled_versions_the_app_indexes_imports_and_serves_grpc() -> None:
    report = run()
    assert report["versions"] == bundled(), "the bundled packages were not the ones imported"
    assert (report["functions"], report["refused"], report["failed"]) == (24, [], {})
    assert report["grpc_live"], "the V2 gRPC lane did not serve under protobuf 4.25 / grpcio 1.59"


def test_the_v2_stubs_carry_no_runtime_version_check() -> None:
    """Gencode at the protobuf 4.25 level loads under 4.25 and under the pins; newer gencode
    first calls `runtime_version`, which 4.25 lacks (make stubs regenerates them)."""
    stub = (REPO / "shared" / "adapters" / "oip" / "grpc_predict_v2_pb2.py").read_text()
    assert "runtime_version" not in stub


def test_a_pep_585_annotation_put_back_is_refused_as_the_311_worker_refuses_it(tmp_path: Path) -> None:
    source = (REPO / "function_app.py").read_text()
    (tmp_path / "function_app.py").write_text(source.replace("msgs: List[", "msgs: list["))
    refused = run(tmp_path)["refused"]
    assert refused and "payments: binding msgs has invalid non-type annotation" in refused[0]
