"""The report as a picture: PR curves per version, and what each decline threshold would have cost.

    write_png(root, path, prices)    one PNG of two panels over the log at `root`, a line saying where
                                     (or why not: no labelled decision, matplotlib not installed)

    left    precision against recall of each version and role as its threshold sweeps the scores of its
            labelled decisions, the point its live decline threshold reached marked
    right   the cost of each version's labelled decisions (report.costs' prices) for every decline
            threshold on the grid, the review threshold held at its optimum; the cost-optimal pair and
            the cost as decided (at the lowest score it declined: the log keeps decisions, not
            thresholds) marked. A recommendation only: thresholds change through the promote path.

matplotlib (requirements-dev.txt) is imported here only, when called: never on the Functions path,
never in the daily timer.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from shared.stores.prediction_log.report import GRID, MATURITY_DAYS, Costs, Loaded, costs, labelled

__all__ = ["cost_curve", "pr_curve", "write_png"]

Row = tuple[str, str, str, float, str, bool, float]


def pr_curve(scores: Sequence[float], fraud: Sequence[bool]) -> tuple[Any, Any, Any]:
    """(precision, recall, threshold) at each distinct score, highest first (scikit-learn's points)."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    s, y = np.asarray(scores, dtype=np.float64)[order], np.asarray(fraud, dtype=bool)[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # the last index of each distinct score
    tps = np.cumsum(y)[last]
    predicted = last + 1
    return tps / predicted, tps / max(1, int(y.sum())), s[last]


def cost_curve(rows: Sequence[Row], prices: Costs, review: float, steps: int = GRID) -> tuple[Any, Any]:
    """(decline thresholds, cost) on the grid at or above `review`, the review threshold held there."""
    score = np.array([r[3] for r in rows])
    fraud = np.array([r[5] for r in rows], dtype=bool)
    amount = np.array([r[6] for r in rows])
    grid = np.array([k / steps for k in range(steps + 1) if k / steps >= review - 1e-9])
    totals = []
    for decline in grid:
        declined, reviewed = score >= decline, (score >= review) & (score < decline)
        approved = ~declined & ~reviewed
        totals.append(
            prices.decline_cost * (declined & ~fraud).sum() + prices.review_cost * reviewed.sum()
            + prices.loss_share * amount[approved & fraud].sum()
        )  # fmt: skip
    return grid, np.array(totals)


def write_png(root: Path | Loaded, path: Path, prices: Costs, *, maturity_days: int = MATURITY_DAYS) -> str:
    """The two panels into `path`, over mature days (as the costs); a line saying what was written."""
    rows = labelled(root, maturity_days=maturity_days)
    if not rows:
        return f"no PNG: no labelled decision of a mature day under {root}"
    try:
        import matplotlib

        matplotlib.use("Agg")  # NOTE: files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return "no PNG: matplotlib is not installed (pip install -r requirements-dev.txt)"
    optimal = {(c["model"], c["version"], c["role"]): c for c in costs(root, prices, maturity_days=maturity_days)}
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for key, group in groupby(rows, lambda r: (r[0], r[1], r[2])):
        mine = list(group)
        label = f"{key[0]}/{key[1]} ({key[2]})"
        precision, recall, _ = pr_curve([r[3] for r in mine], [r[5] for r in mine])
        (line,) = left.step(recall, precision, where="post", label=label)
        declined = [r for r in mine if r[4] == "decline"]
        live = min((r[3] for r in declined), default=None)
        if live is not None:
            fraud = sum(r[5] for r in mine)
            caught = sum(r[5] for r in declined)
            left.plot(caught / max(1, fraud), caught / len(declined), "o", color=line.get_color())
        best = optimal.get(key)
        if best is None:
            continue
        grid, cost = cost_curve(mine, prices, best["optimal_review"])
        right.plot(grid, cost, color=line.get_color(), label=f"{label}, review at {best['optimal_review']:.2f}")
        right.plot(best["optimal_decline"], best["optimal_cost"], "*", markersize=14, color=line.get_color())
        if live is not None:
            right.plot(live, best["live_cost"], "o", color=line.get_color())
    left.set(xlabel="recall", ylabel="precision", title="PR curves (dot: the live decline threshold)")
    right.set(xlabel="decline threshold", ylabel="cost of the labelled decisions",
              title="cost by threshold (star: optimal; dot: as decided)")  # fmt: skip
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return f"wrote {path}: PR curves per version, the cost curve with the live and optimal thresholds"
