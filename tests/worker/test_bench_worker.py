"""`python -m bench.worker` runs end to end: the floor and the app through the runtime, each
figure beside its floor (docs/capacity.md's tables come from it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.worker import rpc


@pytest.mark.skipif(not rpc.worker_python().exists(), reason="no conformance runtime: `make worker-venvs`")
def test_one_round_measures_the_app_beside_its_floor_with_envelopes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.worker", "--rounds", "1", "--singles", "40", "--batches", "1",
         "--per-message", "4", "--out", str(tmp_path)],
        cwd=rpc.REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads((tmp_path / "worker.json").read_text())
    for side in ("floor", "app"):
        assert figures[side]["score"]["cpu_us_per_invocation"] > 0
        assert (
            0 < figures[side]["score"]["loop_cpu_us_per_invocation"] < figures[side]["score"]["cpu_us_per_invocation"]
        )
        payments = figures[side]["payments_64"]
        assert payments["cpu_us_per_event"] * 4 == pytest.approx(payments["cpu_us_per_message"])
    assert set(figures["ratio"]) == {
        "score", "score_batch_per_event", "payments_per_event_vs_one_invocation", "payments_per_message_vs_floor",
    }  # fmt: skip
    assert all(value > 0 for value in figures["ratio"].values())
