"""The model registry: which versions are loaded, which one is active, and reloads.

It alone owns the name → versions map. A new version is loaded, warmed and checked
off the event loop, then swapped in by replacing one reference; versions beyond
`keep_versions` are drained (their queued requests finish) and their sessions released.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from shared.batching import Batcher, Completed, split_rows, stack_rows
from shared.cache import PredictionCache
from shared.cache.redis_tier import ewma
from shared.errors import ModelInvalid, ModelNotFound, NotReady
from shared.features import FeatureMapper
from shared.models.runtime import OnnxModel
from shared.models.source import ModelRef, ModelSource, version_key
from shared.models.spec import ModelSpec
from shared.settings import BatchPolicy, OrtOptions

__all__ = ["LoadedModel", "ModelRegistry", "Prediction"]

log = logging.getLogger(__name__)


class Prediction(NamedTuple):
    """One row's score, where it came from, and the batch's cache and model time."""

    score: float
    source: Literal["l1", "l2", "model"]
    cache_s: float = 0.0
    inference_s: float = 0.0


Row = npt.NDArray[np.float32]


@dataclass(eq=False)
class LoadedModel:
    """One warmed model version and the micro-batcher in front of its session.

    A row whose score this process holds answers at once; the others queue. Each
    batch asks Redis once for all its rows, runs the model once on the rows still
    missing (identical rows once), and stores the new scores in the background.
    """

    name: str
    version: str
    model: OnnxModel
    policy: BatchPolicy
    inline: bool = True
    predictions: PredictionCache | None = None
    loaded_at: float = field(default_factory=time.time)
    load_s: float = 0.0
    fingerprint: str = ""  # hash of the model file: a re-uploaded version never hits old cache entries
    rows_run: int = 0
    batch_run_s: float | None = None  # moving average of one model run on a batch
    batcher: Batcher[tuple[str, Row], Prediction] = field(init=False)
    mapper: FeatureMapper = field(init=False)

    def __post_init__(self) -> None:
        # NOTE: inline, the loop is busy while the model runs, so one slot; in a thread, a
        # second batch may form (within the window) while the first one runs.
        slots = 1 if self.inline else 2
        self.batcher = Batcher(self._run, self.policy, max_concurrency=slots, name=f"{self.name}/{self.version}")
        self.mapper = FeatureMapper(self.model.spec)

    @property
    def spec(self) -> ModelSpec:
        return self.model.spec

    async def score(self, row: Row) -> Completed[Prediction]:
        """Score one feature row: from this process's cache, else through the shared micro-batch."""
        key = PredictionCache.key(self.name, f"{self.version}.{self.fingerprint}", row.tobytes())
        if self.predictions is not None:
            score = self.predictions.get_l1(key)
            if score is not None:
                return Completed(Prediction(score, "l1"), 0.0, 0.0, 1)
        return await self.batcher.submit((key, row))

    async def _run(self, items: list[tuple[str, Row]]) -> list[Prediction]:
        started = time.perf_counter()
        known: dict[str, tuple[float, Literal["l1", "l2", "model"]]] = {}
        cache = self.predictions
        use_l2 = cache is not None and cache.pays(self.batch_run_s)
        if cache is not None:
            for key, _ in items:  # NOTE: again, so a row scored by the previous batch is not run twice
                score = cache.get_l1(key)
                if score is not None:
                    known[key] = (score, "l1")
            if use_l2:
                wanted = list(dict.fromkeys(k for k, _ in items if k not in known))
                for key, score in zip(wanted, await cache.get_l2(wanted), strict=True):
                    if score is not None:
                        known[key] = (score, "l2")
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
        matrix = stack_rows(rows)
        # NOTE: a small model runs faster inline than the ~50 µs a thread hop costs.
        scores = self.model.predict(matrix) if self.inline else await asyncio.to_thread(self.model.predict, matrix)
        return [float(s) for s in split_rows(scores, len(rows))]

    async def retire(self) -> None:
        await self.batcher.drain()
        self.model.release()

    def describe(self) -> dict[str, object]:
        return {
            "version": self.version,
            "fingerprint": self.fingerprint,
            "providers": self.model.providers,
            "loaded_at": self.loaded_at,
            "load_ms": round(self.load_s * 1000, 2),
            "features": [f.name for f in self.spec.features],
            "thresholds": {"review": self.spec.thresholds.review, "decline": self.spec.thresholds.decline},
            "batches": self.batcher.batches,
            "requests": self.batcher.items,
            "rows_run": self.rows_run,
            "batch_run_ms": round(self.batch_run_s * 1000, 3) if self.batch_run_s is not None else None,
            "predictions_via_redis": self.predictions.pays(self.batch_run_s) if self.predictions else False,
        }


class ModelRegistry:
    """Loaded versions per model name; the newest version is the active one."""

    def __init__(
        self,
        source: ModelSource,
        ort_options: OrtOptions,
        policy: BatchPolicy,
        keep_versions: int = 2,
        predictions: PredictionCache | None = None,
    ) -> None:
        self.source = source
        self.predictions = predictions
        self._ort = ort_options
        self._policy = policy
        self._keep = keep_versions
        self._models: dict[str, dict[str, LoadedModel]] = {}
        self._active: dict[str, LoadedModel] = {}
        self._lock: asyncio.Lock | None = None
        self.ready = False

    async def load_all(self) -> None:
        """Load the newest `keep_versions` versions of every model in the source."""
        refs = await asyncio.to_thread(self.source.list)
        if not refs:
            raise NotReady(f"no models found in {self.source.description}")
        by_name: dict[str, list[str]] = {}
        for ref in refs:
            by_name.setdefault(ref.name, []).append(ref.version)
        for name, versions in by_name.items():
            loaded = 0
            for version in sorted(versions, key=version_key, reverse=True):  # newest first
                if loaded == self._keep:
                    break
                data = await asyncio.to_thread(self.source.read, ModelRef(name, version))
                try:
                    await self.install(name, version, data)
                except ModelInvalid as exc:
                    # NOTE: a bad file left in the source must not keep every new replica down
                    log.error("skipping %s/%s: %s", name, version, exc.detail)
                    continue
                loaded += 1
        if not self._active:
            raise NotReady(f"no valid model in {self.source.description}")
        self.ready = True

    async def install(self, name: str, version: str, data: bytes) -> LoadedModel:
        """Load, warm and check a model version, then make it active if it is the newest."""
        loaded = await asyncio.to_thread(self._load, name, version, data)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            versions = self._models.setdefault(name, {})
            replaced = versions.get(version)
            versions[version] = loaded
            newest = max(versions, key=version_key)
            self._active[name] = versions[newest]
            retired = [versions.pop(v) for v in sorted(versions, key=version_key)[: -self._keep]]
        if replaced is not None:
            retired.append(replaced)
        log.info("model %s/%s loaded in %.1f ms on %s; active %s/%s", name, version, loaded.load_s * 1000,
                 loaded.model.providers[0], name, self._active[name].version)
        for old in retired:
            await old.retire()
            log.info("model %s/%s released", old.name, old.version)
        return loaded

    def _load(self, name: str, version: str, data: bytes) -> LoadedModel:
        started = time.perf_counter()
        model = OnnxModel.load(data, self._ort)
        model.warm(self._policy.max_size)
        loaded = LoadedModel(
            name, version, model, self._policy, inline=self._ort.inline, predictions=self.predictions,
            fingerprint=hashlib.blake2b(data, digest_size=6).hexdigest(),
        )
        loaded.load_s = time.perf_counter() - started
        return loaded

    def active(self, name: str) -> LoadedModel:
        """The version that serves `name` now."""
        try:
            return self._active[name]
        except KeyError:
            if not self.ready:
                raise NotReady("models are still loading") from None
            raise ModelNotFound(f"no model named {name!r}") from None

    def loaded_versions(self, name: str) -> list[str]:
        return sorted(self._models.get(name, {}), key=version_key)

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "name": name,
                "active_version": active.version,
                "versions": self.loaded_versions(name),
                "providers": active.model.providers,
                "loaded_at": active.loaded_at,
                "loaded": [m.describe() for m in self._models[name].values()],
            }
            for name, active in sorted(self._active.items())
        ]

    async def aclose(self) -> None:
        for versions in self._models.values():
            for loaded in versions.values():
                await loaded.retire()
        self._models.clear()
        self._active.clear()
