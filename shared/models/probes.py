"""Rows an attacker would score a model with, before any replica serves it.

A graph can size its work from its input's values, so a trial on the declared defaults alone
proves little. `adversarial` gives the trial (shared/models/sandbox.py) each feature at very
large and very small magnitudes of both signs, zeros, NaN and the infinities, the golden rows,
and a full batch of the largest values; `attack` scores them under the serving bounds. Its
`max_score` is the highest score those rows produce, which a promote compares with the version's
decline threshold (shared/fleet/versions.py): a version whose decline is above every score it
gave could never decline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from shared.domain.spec import ModelSpec
from shared.errors import InferenceFailed, RunOverBudget

__all__ = ["EXTREMES", "Attack", "Probe", "adversarial", "attack"]

EXTREMES = (0.0, 1e-30, -1e-30, 1.0, -1.0, 1e6, -1e6, 3e38, -3e38, np.nan, np.inf, -np.inf)
Matrix = npt.NDArray[np.float32]


class Probe(NamedTuple):
    """One batch of rows and what it tries."""

    what: str
    rows: Matrix


def adversarial(spec: ModelSpec, max_batch: int) -> Iterator[Probe]:
    """Batches of rows: each value of EXTREMES in each feature (one batch per value), then the golden rows
    and a full batch of the largest values."""
    defaults = np.array([f.default for f in spec.features], dtype=np.float32)
    width = len(defaults)
    for value in EXTREMES:
        rows = np.tile(defaults, (width + 1, 1))
        for column in range(width):
            rows[column, column] = value
        rows[width] = value  # every feature at once
        yield Probe(f"features at {value:g}", rows)
    if spec.golden is not None:
        yield Probe("the golden rows", np.array(spec.golden.rows, dtype=np.float32))
    yield Probe(f"a full batch of {max_batch} rows at 3e38", np.full((max_batch, width), 3e38, dtype=np.float32))


class Attack(NamedTuple):
    """What the adversarial rows showed: the highest finite score and the slowest run."""

    max_score: float
    slowest_run_ms: float


def attack(predict: Callable[[Matrix], npt.NDArray[np.float64]], spec: ModelSpec, max_batch: int) -> Attack:
    """Score every adversarial batch with `predict` (the serving run, under its bounds).

    A batch a bound stops raises `RunOverBudget` naming the rows; a batch the model cannot run
    otherwise (a NaN row a graph rejects) gives no score.
    """
    best, slowest = 0.0, 0.0
    for probe in adversarial(spec, max_batch):
        started = time.perf_counter()
        try:
            scores = predict(probe.rows)
        except RunOverBudget as exc:
            raise RunOverBudget(f"scoring {probe.what}: {exc.detail}", limit=exc.limit) from exc
        except InferenceFailed:
            continue
        finally:
            slowest = max(slowest, time.perf_counter() - started)
        finite = scores[np.isfinite(scores)]
        if finite.size:
            best = max(best, float(finite.max()))
    return Attack(best, round(slowest * 1000, 3))
