"""Reason codes by occlusion: the features that raised one score most, and by how much.

Method. A row x scored s. Each column j whose value differs from its default d_j (the
mapper's template: the declared default, 0.0 for an indicator column) is occluded alone,
x⁽ʲ⁾ = x with x_j := d_j; one model run scores every x⁽ʲ⁾ at once (a matrix of k rows, k the
columns off their default), and j's contribution is s - f(x⁽ʲ⁾): how far the score falls
when j alone goes back to its default. The reason codes are the `explain_top` (3) largest positive
contributions, largest first. A column on its default is never named (there is nothing to
occlude), nor is one whose return to its default would raise the score.

Cost: building the k * width matrix and one model run on k rows (k ≤ width). Measured at 25
features, all off their default, on the tiny test model (a 2-core development machine): 22 µs
a call, 5 µs of it the model run.
Budget: before running, the run is estimated at the version's moving average of a batch run
(`batch_run_s`) per BATCH_MAX_SIZE rows of the matrix; over `explain_budget_ms` (5 ms), there are no
reason codes (None), and none either when the run took longer than the budget after all
(a version that has run no batch yet has no estimate: it runs, and the elapsed time decides).

Where it runs: `reason_codes` runs wherever it is called; `explain` (an `?explain=1` answer)
calls it on the event loop when the version runs inline (`loaded.inline`: a small model,
cheaper than a thread hop), else in a worker thread, as the batcher does. `explain_many` (the
prediction log's records, hundreds at a time, no answer waiting) always runs its one model run
in a worker thread: the hop is shared by the batch, and the loop serves requests meanwhile.

Limits (occlusion is not SHAP):
- Interactions. Each feature is judged with every other one as it is: where two act only
  together, occluding either removes the whole joint effect, so both are credited with it; the
  contributions need not add up to s - f(defaults). SHAP's do, by averaging each feature's
  effect over the subsets of the others (2^k runs exactly, many sampled ones in practice).
- Correlated features. Occluding one leaves its correlates as they are, so x⁽ʲ⁾ may be a row
  the model never saw (`log_amount` on its default beside a large `amount`): its answer there
  is off its data. And two features carrying the same signal each look weak, since the other
  still holds it.
- The baseline is the default, not a typical row: a feature at a common value that is not its
  default is weighed against the default all the same.
"""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import numpy.typing as npt

from shared.domain.answers import ReasonCode
from shared.domain.spec import ModelSpec
from shared.errors import InferenceFailed
from shared.models.served import LoadedModel
from shared.policies import DriftPolicy

__all__ = ["estimated_s", "explain", "explain_many", "reason_codes", "reason_codes_many"]


def estimated_s(loaded: LoadedModel, rows: int) -> float | None:
    """How long a run on `rows` rows should take: the moving average of a batch run per
    BATCH_MAX_SIZE rows (None before the version has run a batch)."""
    if loaded.batch_run_s is None:
        return None
    return loaded.batch_run_s * math.ceil(rows / loaded.policy.max_size)


def reason_codes(
    loaded: LoadedModel, row: npt.NDArray[np.float32], score: float, policy: DriftPolicy
) -> list[ReasonCode] | None:
    """The `policy.explain_top` features whose return to their default lowers `score` most, largest
    first; None when that cannot be known within `policy.explain_budget_ms` (or the version's session is gone)."""
    started = time.perf_counter()
    budget_s = policy.explain_budget_ms / 1000.0
    base = loaded.mapper.defaults
    off = np.flatnonzero(row != base)
    if not len(off):
        return []
    estimate = estimated_s(loaded, len(off))
    if estimate is not None and estimate > budget_s:
        return None
    occluded = np.tile(row.astype(np.float32, copy=False), (len(off), 1))
    occluded[np.arange(len(off)), off] = base[off]
    try:
        scores = loaded.model.predict(occluded)
    except InferenceFailed:  # a retired version's released session; the answer stands without codes
        return None
    if time.perf_counter() - started > budget_s:
        return None
    drops = np.round(score - scores, 6)  # as answered; a drop that rounds to 0 names nothing
    top = [i for i in np.argsort(-drops, kind="stable")[: policy.explain_top] if drops[i] > 0]
    return [_code(loaded.spec, int(off[i]), row, base, float(drops[i])) for i in top]


def _code(
    spec: ModelSpec, j: int, row: npt.NDArray[np.float32], base: npt.NDArray[np.float32], drop: float
) -> ReasonCode:
    return ReasonCode(spec.features[j].name, round(float(row[j]), 6), round(float(base[j]), 6), drop)


def reason_codes_many(
    loaded: LoadedModel, rows: npt.NDArray[np.float32], scores: npt.NDArray[np.float64], policy: DriftPolicy
) -> list[list[ReasonCode]] | None:
    """`reason_codes` for many rows of one version at once (the prediction log's records): every
    row's occlusions in one model run and one vectorised ranking, so a record costs a few µs,
    not a call. The same codes as one call per row (tests/models/test_explain.py holds them
    equal); None when the run would not fit `policy.explain_budget_ms`, or the session is gone."""
    plan = _occlusions(loaded, rows, policy)
    if not isinstance(plan, _Occlusions):
        return plan
    try:
        occluded_scores = loaded.model.predict(plan.matrix)
    except InferenceFailed:
        return None
    return plan.ranked(loaded.spec, scores, occluded_scores, policy.explain_top)


async def explain_many(
    loaded: LoadedModel, rows: npt.NDArray[np.float32], scores: npt.NDArray[np.float64], policy: DriftPolicy
) -> list[list[ReasonCode]] | None:
    """`reason_codes_many` with its model run in a worker thread, whatever the version's `inline`.

    For the prediction log's writer, whose records no answer waits for: one hop (~20 µs
    of the loop) carries the occlusions of a whole batch (hundreds of rows, ~1 µs each), and
    ONNX Runtime releases the GIL while it runs, so the loop serves requests meanwhile."""
    plan = _occlusions(loaded, rows, policy)
    if not isinstance(plan, _Occlusions):
        return plan
    try:
        occluded_scores = await asyncio.to_thread(loaded.model.predict, plan.matrix)
    except InferenceFailed:
        return None
    return plan.ranked(loaded.spec, scores, occluded_scores, policy.explain_top)


class _Occlusions:
    """Many rows' occluded copies: one matrix row per (row `at`, column `columns`) off its default."""

    __slots__ = ("at", "columns", "count", "defaults", "matrix", "values")

    def __init__(self, rows: npt.NDArray[np.float32], at: npt.NDArray[np.intp], columns: npt.NDArray[np.intp],
                 defaults: npt.NDArray[np.float32]) -> None:  # fmt: skip
        self.count, self.at, self.columns, self.defaults = len(rows), at, columns, defaults
        self.values = rows[at, columns]
        matrix = rows[at]  # a fancy index is a copy already
        if matrix.dtype != np.float32:
            matrix = matrix.astype(np.float32)
        matrix[np.arange(len(at)), columns] = defaults
        self.matrix = matrix

    def ranked(
        self, spec: ModelSpec, scores: npt.NDArray[np.float64], occluded: npt.NDArray[np.float64], top: int
    ) -> list[list[ReasonCode]]:
        """Each row's first `top` positive drops, largest first, ties to the lower column (as a
        stable sort of each row's drops would rank them).

        Only the occluded columns are ranked (not a row * width matrix), and only the
        chosen few become Python objects: by row, then the largest drop first (NaN last), a
        row's positive drops lead its run, so its first `top` entries that are positive are
        its codes."""
        at, columns = self.at, self.columns
        drops = np.round(scores[at] - occluded, 6)  # as answered; a drop that rounds to 0 names nothing
        order = np.lexsort((columns, -drops, at))
        by_row = at[order]
        first = np.flatnonzero(np.concatenate(([True], by_row[1:] != by_row[:-1])))
        rank = np.arange(len(order)) - np.repeat(first, np.diff(np.append(first, len(order))))
        chosen = order[(rank < top) & (drops[order] > 0)]
        names = [f.name for f in spec.features]
        codes: list[list[ReasonCode]] = [[] for _ in range(self.count)]
        for row, column, value, default, drop in zip(
            at[chosen].tolist(), columns[chosen].tolist(), self.values[chosen].tolist(),
            self.defaults[chosen].tolist(), drops[chosen].tolist(), strict=True,
        ):  # fmt: skip
            codes[row].append(ReasonCode(names[column], round(value, 6), round(default, 6), drop))
        return codes


def _occlusions(
    loaded: LoadedModel, rows: npt.NDArray[np.float32], policy: DriftPolicy
) -> _Occlusions | list[list[ReasonCode]] | None:
    """What to run, or the answer without a run: no codes for any row (every column on its
    default), or None (the run would not fit the budget: per row here, as for one row)."""
    base = loaded.mapper.defaults
    at, columns = np.nonzero(rows != base)  # a column on its default: occluding it changes nothing
    if not len(at):
        return [[] for _ in range(len(rows))]
    estimate = estimated_s(loaded, len(at))
    if estimate is not None and estimate > policy.explain_budget_ms / 1000.0 * len(rows):
        return None
    return _Occlusions(rows, at, columns, base[columns])


async def explain(
    loaded: LoadedModel, row: npt.NDArray[np.float32], score: float, policy: DriftPolicy
) -> list[ReasonCode] | None:
    """`reason_codes` on the event loop for a version run inline, else in a worker thread."""
    if loaded.inline:
        return reason_codes(loaded, row, score, policy)
    return await asyncio.to_thread(reason_codes, loaded, row, score, policy)
