"""`make publish-model`: a checked file lands whole in the source; a bad one never does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.onnx_models import make_model

REPO = Path(__file__).resolve().parent.parent


def publish(models_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MODELS_DIR": str(models_dir),
        "ModelStorage": "",
        "ModelStorage__blobServiceUri": "",
    }
    command = [sys.executable, "scripts/publish_model.py", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_a_checked_model_lands_in_the_directory(models_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "candidate.onnx"
    model.write_bytes(make_model(bias=1.0))
    done = publish(models_dir, "fraud", "2", str(model))
    assert done.returncode == 0, done.stderr
    assert (models_dir / "fraud" / "2" / "model.onnx").read_bytes() == model.read_bytes()
    assert not list((models_dir / "fraud" / "2").glob(".*partial"))


def test_a_bad_file_or_version_is_refused_before_it_lands(models_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    done = publish(models_dir, "fraud", "3", str(bad))
    assert done.returncode == 1 and "cannot load" in done.stderr and not (models_dir / "fraud" / "3").exists()
    good = tmp_path / "good.onnx"
    good.write_bytes(make_model())
    done = publish(models_dir, "fraud", "01", str(good))
    assert done.returncode == 1 and "must be an integer" in done.stderr
