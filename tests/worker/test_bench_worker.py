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
    # every phase of the app counted its verdicts, and every event was scored
    app = figures["app"]
    assert app["score"]["verdicts"] == {"completed": 40}
    assert app["score_batch_64"]["verdicts"] == {"completed": 10 * 64}
    assert app["payments_64"]["verdicts"] == {"completed": (3 + 1) * 64 * 4}
    assert figures["machine"]["per_message"] == 4


@pytest.mark.skipif(not rpc.worker_python().exists(), reason="no conformance runtime: `make worker-venvs`")
def test_a_round_fed_expired_events_reports_nothing(tmp_path: Path) -> None:
    """Events older than the idempotency window are refused by the queue path (`event_expired`):
    the `payments` figure would time rejections, so the bench stops and writes no figures."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.worker", "--rounds", "1", "--singles", "20", "--batches", "1",
         "--event-age-s", "7200", "--out", str(tmp_path)],
        cwd=rpc.REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "WorkNotDone: payments_64" in done.stderr and "rejected:event_expired" in done.stderr
    assert not (tmp_path / "worker.json").exists()
