"""The outcomes demo (scripts/demo_outcomes.py) run as a newcomer runs it, then read as `make outcomes` reads
it: 170 days scored by the app `make run` serves, the outcomes learned by now through the outcome desk,
the newest mature week's recall below the version's own baseline by more than the alert's threshold (the
drifted segment), recent days immature, every outcome written; the two commands in under a minute."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from shared.stores.prediction_log import daily, report

REPO = Path(__file__).resolve().parent.parent
ALERT_DROP = 0.1  # infra/modules/alerts.bicep, recallDropThreshold


def test_the_demo_shows_the_model_degrading_on_its_drifted_segment_within_a_minute(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREDICTION_LOG")} | {"PYTHONPATH": str(REPO)}
    started = time.monotonic()
    demo = subprocess.run([sys.executable, "scripts/demo_outcomes.py", "--dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    shown = subprocess.run([sys.executable, "-m", "shared.stores.prediction_log.report", "--dir", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert "17,000 payments over 170 days" in demo.stdout and "0 refused" in demo.stdout
    assert "IMMATURE" in shown.stdout and "unmatched (no decision found yet): 0" in shown.stdout

    built = report.build(tmp_path)
    found = {h.window: h for h in daily.headlines(built)}
    assert found["baseline"].recall is not None and found["current"].recall is not None
    assert found["baseline"].recall - found["current"].recall > ALERT_DROP
    assert daily.immature_shares(built)[("fraud", "1", "live")] > 0.5  # 120 of 170 days still await chargebacks
    assert built.outcomes == int(demo.stdout.split(" outcomes learned")[0].rsplit(" ", 1)[1].replace(",", ""))
