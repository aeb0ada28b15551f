"""One ensemble over resolved member versions, served like a model version.

It has what the core asks of a served version: a name and version, a spec (its input
columns are the union of its members', in order of first appearance; its thresholds are
the declared decision, the meta-model's, or the first member's) with a feature mapper, and
`score(row)`. A row is split into each member's columns; the members score concurrently,
each through its own cache and micro-batcher, and their scores are combined.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from shared.domain.answers import EnsembleBuild, Platform, ReasonCode, ThresholdsView
from shared.domain.feast_spec import FeastSpec
from shared.domain.signature import SCORE_OUTPUT
from shared.domain.spec import FeatureDef, ModelSpec
from shared.errors import ModelInvalid
from shared.features.mapping import FeatureMapper
from shared.models.ensembles.declaration import Declaration
from shared.models.onnx import OnnxModel
from shared.models.served import LoadedModel, Prediction, Row
from shared.policies import DriftPolicy
from shared.runtime.batching.batcher import Completed

__all__ = ["Ensemble"]

Combine = Callable[[list[float]], float]


class Ensemble:
    """Members at fixed versions, a combination method, and the union of their input columns."""

    platform: Platform = "ensemble"
    fingerprint = ""  # no one file: its members' fingerprints key their own predictions
    explains = False  # occlusion runs one model: an ensemble's answers carry no reason codes

    def __init__(self, declaration: Declaration, members: Sequence[LoadedModel], meta: OnnxModel | None) -> None:
        self.declaration = declaration
        self.name = declaration.name
        self.version = declaration.version
        self.members = tuple(members)
        features = _union(members)
        thresholds = declaration.decision or (meta.spec.thresholds if meta else members[0].spec.thresholds)
        feast = FeastSpec.union(m.spec.feast for m in members)  # the members' Feast columns, read once
        self.spec = ModelSpec(features, members[0].spec.input_name, SCORE_OUTPUT, 0, thresholds, feast=feast)
        self.mapper = FeatureMapper(self.spec)
        names = [f.name for f in features]
        self._plan = [(m, _columns(names, m.spec)) for m in members]
        self._labels = tuple(f"{m.name}/{m.version}" for m in members)
        self._combine = _combiner(declaration, meta)

    async def score(self, row: Row) -> Completed[Prediction]:
        """Every member scores its columns of `row` (concurrently); their scores are combined."""
        done = await asyncio.gather(*(m.score(row if cols is None else row[cols]) for m, cols in self._plan))
        scores = [d.value.score for d in done]
        ran = [d.value for d in done if d.value.source == "model"]
        prediction = Prediction(
            self._combine(scores),
            "model" if ran else done[0].value.source,
            max(d.value.cache_s for d in done),
            max(d.value.inference_s for d in done),
            dict(zip(self._labels, scores, strict=True)),
        )
        return Completed(prediction, max(d.queued_s for d in done), max(d.run_s for d in done), len(done))

    async def reasons(self, row: Row, score: float, policy: DriftPolicy) -> list[ReasonCode] | None:
        return None

    def describe(self) -> EnsembleBuild:
        """This build: members, method and its parameters, columns, thresholds (`/api/models`)."""
        d = self.declaration
        return EnsembleBuild(
            version=self.version,
            method=d.method,
            members=list(self._labels),
            weights=list(d.weights),
            thresholds=list(d.thresholds),
            meta_model=d.meta_model,
            features=[f.name for f in self.spec.features],
            decision=ThresholdsView(self.spec.thresholds.review, self.spec.thresholds.decline),
        )


def _union(members: Sequence[LoadedModel]) -> tuple[FeatureDef, ...]:
    seen: dict[str, FeatureDef] = {}
    for member in members:
        for feature in member.spec.features:
            seen.setdefault(feature.name, feature)  # the first member's default wins
    return tuple(seen.values())


def _columns(union: list[str], spec: ModelSpec) -> npt.NDArray[np.intp] | None:
    """Where a member's columns sit in the union row (None: the union row is its row)."""
    names = [f.name for f in spec.features]
    if names == union:
        return None
    return np.array([union.index(n) for n in names], dtype=np.intp)


def _combiner(declaration: Declaration, meta: OnnxModel | None) -> Combine:
    if declaration.method == "weighted_average":
        weights, total = declaration.weights, sum(declaration.weights)
        return lambda scores: sum(w * s for w, s in zip(weights, scores, strict=True)) / total
    if declaration.method == "voting":
        cuts, n = declaration.thresholds, len(declaration.thresholds)
        return lambda scores: sum(s >= t for s, t in zip(scores, cuts, strict=True)) / n
    if meta is None:
        raise ModelInvalid(f"ensemble {declaration.name}: stacking needs its meta-model")
    expected = [m.name for m in declaration.members]
    if [f.name for f in meta.spec.features] != expected:
        raise ModelInvalid(
            f"ensemble {declaration.name}: the meta-model's serving.features must be the members {expected}"
        )
    model = meta  # a tiny model on a handful of scores: run inline, no batcher

    def stack(scores: list[float]) -> float:
        return float(model.predict(np.array([scores], dtype=np.float32))[0])

    return stack
