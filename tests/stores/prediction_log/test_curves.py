"""The report's picture: PR curves held to scikit-learn's on the same data, the cost curve's minimum to the
report's own optimum, and a real PNG written by matplotlib over a log the real writer and outcome store made."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import precision_recall_curve

from shared.stores.prediction_log import curves, report
from tests.stores.prediction_log.test_report import DAY, fraud, keep, log_decisions


def test_the_pr_curve_is_scikit_learns_with_ties() -> None:
    rng = random.Random(3)  # noqa: S311 reproducible test data
    scores = [round(rng.random(), 1) for _ in range(500)]  # many ties on purpose
    truth = [rng.random() < s for s in scores]
    precision, recall, thresholds = curves.pr_curve(scores, truth)
    sk_precision, sk_recall, sk_thresholds = precision_recall_curve(truth, scores)
    # scikit-learn's arrays run lowest threshold first and end with the (1, 0) point it adds
    assert np.allclose(precision, sk_precision[:-1][::-1])
    assert np.allclose(recall, sk_recall[:-1][::-1])
    assert np.allclose(thresholds, sk_thresholds[::-1])


async def test_the_cost_curve_bottoms_out_at_the_reports_optimum_and_the_png_is_written(tmp_path: Path) -> None:
    rng = random.Random(11)  # noqa: S311
    scores = {i: round(rng.random(), 2) for i in range(300)}
    await log_decisions(tmp_path, scores)
    await keep(tmp_path, [fraud(i, kind="fraud" if rng.random() < 0.1 + 0.6 * scores[i] else "legit") for i in scores])
    prices = report.Costs(loss_share=0.1, review_cost=5.0, decline_cost=20.0)  # losses small: some fraud approved
    (best,) = report.costs(tmp_path, prices, today=DAY + timedelta(days=200))
    assert best["optimal_review"] > 0.2  # the approved side holds fraud: its loss is on the curve
    rows = report.labelled(tmp_path, today=DAY + timedelta(days=200))
    grid, cost = curves.cost_curve(rows, prices, best["optimal_review"])
    assert cost.min() == pytest.approx(best["optimal_cost"])
    assert cost[np.isclose(grid, best["optimal_decline"])][0] == pytest.approx(cost.min())  # ties: the report's pick

    png = tmp_path / "out" / "outcomes.png"
    assert curves.write_png(tmp_path, png, prices).startswith("no PNG")  # DAY is days ago: its labels immature
    said = curves.write_png(tmp_path, png, prices, maturity_days=0)
    assert said.startswith("wrote") and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert curves.write_png(tmp_path / "empty", png, prices).startswith("no PNG")
    assert report.build(tmp_path, today=DAY + timedelta(days=1)).rows  # the same log the report reads
