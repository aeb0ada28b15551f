"""What serves a name (`Served`), and one served model version: its warmed session, feature mapper and micro-batcher.

A row whose score this process holds answers at once; the others queue. Each batch
asks the prediction cache once for all its rows (L1, then one Redis MGET), runs the
model once on the rows still missing (identical rows once), and stores the new scores
in the background. The registry decides which version serves; this unit only serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from shared.domain.answers import LoadedVersion, Platform, ReasonCode, ThresholdsView
from shared.domain.spec import ModelSpec
from shared.errors import BatcherClosed, RunOverBudget
from shared.features.mapping import FeatureMapper
from shared.models.onnx import OnnxModel
from shared.policies import BatchPolicy
from shared.runtime.batching.batcher import Batcher, Completed
from shared.runtime.batching.rows import split_rows, stack_rows
from shared.stores.cache.predictions import PredictionCache
from shared.stores.cache.tier import ewma
from shared.telemetry import metrics

if TYPE_CHECKING:
    from shared.policies import DriftPolicy

__all__ = ["ROWS_PER_RUN", "LoadedModel", "Prediction", "Row", "Served"]

Row = npt.NDArray[np.float32]
ROWS_PER_RUN = 64  # rows of a batch request per model run (they arrive together: no window)
Origin = Literal["l1", "l2", "model"]


class Prediction(NamedTuple):
    """One row's score, where it came from, and the batch's cache and model time
    (and, from an ensemble, each member's score by `name/version`)."""

    score: float
    source: Origin
    cache_s: float = 0.0
    inference_s: float = 0.0
    parts: Mapping[str, float] | None = None


class Served(Protocol):
    """What serves a name, as the core sees it: a model version (`LoadedModel`) or an ensemble
    (shared/models/ensembles/ensemble.py). Both map an event to a row and score it; the core asks no more."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...  # the file's short hash ("" for an ensemble: no one file)

    @property
    def platform(self) -> Platform: ...

    @property
    def spec(self) -> ModelSpec: ...

    @property
    def mapper(self) -> FeatureMapper: ...

    @property
    def explains(self) -> bool: ...  # whether `reasons` can name the features behind a score

    async def score(self, row: Row) -> Completed[Prediction]: ...

    async def reasons(self, row: Row, score: float, policy: DriftPolicy) -> list[ReasonCode] | None: ...


@dataclass(eq=False)
class LoadedModel:
    """One warmed model version and the micro-batcher in front of its session."""

    name: str
    version: str
    model: OnnxModel
    policy: BatchPolicy
    inline: bool = True
    predictions: PredictionCache | None = None
    loaded_at: float = field(default_factory=time.time)
    load_s: float = 0.0
    fingerprint: str = ""  # short hash of the model file: the key prefix of its cached predictions
    digest: str = ""  # the file's SHA-256: what a release record and a pin vouch for
    trial_s: float = 0.0  # the sandbox's trial of the file, part of `load_s`
    max_score: float | None = None  # the highest score the trial's adversarial rows produced (None: not tried)
    # called when a run of this version trips a bound (the registry quarantines it)
    on_over_budget: Callable[[LoadedModel, RunOverBudget], None] | None = None
    quarantined: str | None = None  # why this version no longer runs (its runs answer `RunOverBudget`)
    rows_run: int = 0
    batch_run_s: float | None = None  # moving average of one model run on a batch
    batcher: Batcher[tuple[str, Row], Prediction] = field(init=False)
    mapper: FeatureMapper = field(init=False)

    def __post_init__(self) -> None:
        # inline, the loop is busy while the model runs, so one slot; in a thread, a
        # second batch may form (within the window) while the first one runs.
        slots = 1 if self.inline else 2
        self.batcher = Batcher(self._run, self.policy, max_concurrency=slots, name=f"{self.name}/{self.version}")
        self.mapper = FeatureMapper(self.model.spec)
        self._key_prefix = f"{self.version}.{self.fingerprint}"

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    @property
    def platform(self) -> Platform:
        return "onnx_onnxv1"

    @property
    def explains(self) -> bool:
        return True

    async def reasons(self, row: Row, score: float, policy: DriftPolicy) -> list[ReasonCode] | None:
        """The features whose return to their defaults lowers `score` most (shared/models/explain.py)."""
        from shared.models.explain import explain  # asked for by ?explain=1 only

        return await explain(self, row, score, policy)

    async def score(self, row: Row) -> Completed[Prediction]:
        """Score one feature row: from this process's cache, else through the shared micro-batch."""
        key = PredictionCache.key(self.name, self._key_prefix, row.tobytes())
        if self.predictions is not None:
            score = self.predictions.get_l1(key)  # a hit needs no future and no batch
            if score is not None:
                return Completed(Prediction(score, "l1"), 0.0, 0.0, 1)
        return await self.batcher.submit((key, row))

    @property
    def takes_rows(self) -> bool:
        """Whether `score_rows` serves (a model run inline, not being retired)."""
        return self.inline and not self.batcher.closing

    async def score_rows(self, rows: list[Row]) -> list[Prediction]:
        """Score rows that arrived together (a batch request): they are their own model batches.

        No window to wait for and no future per row: the rows this process holds answer
        at once, the rest go through `_run` in chunks of up to ROWS_PER_RUN (one cache lookup,
        one model run each). Only for models run inline, on the event loop, where a run cannot
        overlap a retirement; `BatcherClosed` tells the caller to take the per-row path.
        """
        if not self.takes_rows:
            raise BatcherClosed(f"{self.name}/{self.version} takes rows one by one")
        keys = [PredictionCache.key(self.name, self._key_prefix, row.tobytes()) for row in rows]
        answers: list[Prediction | None] = [None] * len(rows)
        pending: list[int] = []
        cache = self.predictions
        for i, key in enumerate(keys):
            score = cache.get_l1(key) if cache is not None else None
            if score is None:
                pending.append(i)
            else:
                answers[i] = Prediction(score, "l1")
        for start in range(0, len(pending), ROWS_PER_RUN):
            chunk = pending[start : start + ROWS_PER_RUN]
            done = await self._run([(keys[i], rows[i]) for i in chunk], l1_checked=True)
            for i, prediction in zip(chunk, done, strict=True):
                answers[i] = prediction
        self.batcher.batches += (len(pending) + ROWS_PER_RUN - 1) // ROWS_PER_RUN
        self.batcher.items += len(pending)
        return answers  # type: ignore[return-value]  # every slot is filled above

    async def _run(self, items: list[tuple[str, Row]], *, l1_checked: bool = False) -> list[Prediction]:
        started = time.perf_counter()
        metrics.batch(self.name, len(items))  # once per batch, not per row
        cache = self.predictions
        use_l2 = cache is not None and cache.pays(self.batch_run_s)
        known: dict[str, tuple[float, Origin]] = {}
        if cache is not None:
            known.update(await cache.lookup([key for key, _ in items], use_l2=use_l2, l1_checked=l1_checked))
        cache_s = time.perf_counter() - started
        missing = {key: row for key, row in items if key not in known}
        inference_s = 0.0
        if missing:
            started = time.perf_counter()
            scores = await self._predict(list(missing.values()))
            self.rows_run += len(missing)
            inference_s = time.perf_counter() - started
            self.batch_run_s = ewma(self.batch_run_s, inference_s)
            fresh = list(zip(missing, scores, strict=True))
            known.update((key, (score, "model")) for key, score in fresh)
            if cache is not None:
                cache.store(fresh, l2=use_l2)
        return [Prediction(*known[key], cache_s, inference_s) for key, _ in items]

    async def _predict(self, rows: list[Row]) -> list[float]:
        if self.model.released:  # only rows of a batch request (score_rows) can get here late
            if self.quarantined is not None:  # rows queued behind the run that tripped: never run again
                raise RunOverBudget(f"{self.name}/{self.version} is quarantined: {self.quarantined}")
            raise BatcherClosed(f"{self.name}/{self.version} was retired")
        matrix = stack_rows(rows)
        try:
            # a small model runs faster inline than a thread hop costs (docs/benchmark.md)
            scores = self.model.predict(matrix) if self.inline else await asyncio.to_thread(self.model.predict, matrix)
        except RunOverBudget as exc:
            self._tripped(exc, len(rows))
            raise
        return [float(s) for s in split_rows(scores, len(rows))]

    def _tripped(self, exc: RunOverBudget, rows: int) -> None:
        """A run tripped a bound: this version never runs again here; the registry is told."""
        metrics.over_budget(self.name, exc.limit, rows)
        if self.quarantined is None:
            self.quarantined = exc.detail
            self.model.release()
            if self.on_over_budget is not None:
                self.on_over_budget(self, exc)

    async def retire(self) -> None:
        """Let queued requests finish, then release the session."""
        await self.batcher.drain()
        self.model.release()

    def describe(self) -> LoadedVersion:
        """This version and its counters (`/api/models`)."""
        return LoadedVersion(
            self.version,
            self.fingerprint,
            self.digest,
            self.model.providers,
            self.loaded_at,
            round(self.load_s * 1000, 2),
            [f.name for f in self.spec.features],
            ThresholdsView(self.spec.thresholds.review, self.spec.thresholds.decline),
            self.batcher.batches,
            self.batcher.items,
            self.batcher.shed,
            self.rows_run,
            round(self.batch_run_s * 1000, 3) if self.batch_run_s is not None else None,
            self.predictions.pays(self.batch_run_s) if self.predictions else False,
        )
