"""requirements.txt installs on every laptop we support: its pins resolve to wheels there (scripts/check_platforms.py).

Asked of the package index (one page a project, nothing downloaded or installed); where the index
cannot be reached the two index tests skip and say so. The marker logic is checked offline.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.check_platforms import PLATFORMS, pins_for

REPO = Path(__file__).resolve().parent.parent


def check(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "scripts/check_platforms.py", *args]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    if done.returncode == 3:
        pytest.skip(f"the package index cannot be reached, so the platforms were not checked: {done.stderr.strip()}")
    return done


def onnxruntime_for(platform: str, requirements: Path = REPO / "requirements.txt") -> list[str]:
    (chosen,) = [p for p in PLATFORMS if p.name == platform]
    return [pin.name for pin in pins_for(chosen, requirements) if pin.name.startswith("onnxruntime")]


def test_each_platform_gets_its_onnx_runtime_build() -> None:
    assert onnxruntime_for("linux-x86_64") == ["onnxruntime-gpu"]  # the image: CUDA where a GPU is usable
    for laptop in ("linux-arm64", "macos-arm64", "macos-x86_64", "windows-x86_64"):
        assert onnxruntime_for(laptop) == ["onnxruntime"], laptop


def test_the_pins_resolve_to_wheels_on_every_platform() -> None:
    done = check()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("resolves") == len(PLATFORMS), done.stdout


LAPTOPS = ("linux-x86_64", "linux-arm64", "macos-arm64", "macos-x86_64")


# NOTE: what `make test` installs besides the app's pins (the 3.13 worker runtime is optional: its tests skip)
@pytest.mark.parametrize(
    "requirements",
    [
        "requirements-dev.txt",
        "requirements-infra.txt",
        "requirements-feast.txt",
        "requirements-worker311.txt",
        "requirements-worker311-2026.txt",
    ],
)
def test_make_test_installs_on_every_laptop(requirements: str) -> None:
    done = check("--requirements", str(REPO / requirements), *LAPTOPS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_fails_on_a_pin_without_a_wheel_there(tmp_path: Path) -> None:
    """Mutation: the GPU build for every platform (as before the markers) fails on macOS and Linux arm64."""
    unmarked = tmp_path / "requirements.txt"
    unmarked.write_text("onnxruntime-gpu==1.23.2\nnumpy==2.3.5\n")
    done = check("--requirements", str(unmarked), "macos-arm64", "linux-arm64", "linux-x86_64")
    assert done.returncode == 1
    assert "macos-arm64     DOES NOT RESOLVE: onnxruntime-gpu==1.23.2" in done.stdout
    assert "linux-arm64     DOES NOT RESOLVE: onnxruntime-gpu==1.23.2" in done.stdout
    assert "linux-x86_64    resolves" in done.stdout
