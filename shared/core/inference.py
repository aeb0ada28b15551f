"""Tensor level: feature rows → scores, through the same batchers and caches as events (V2, ensembles).

Each row goes through its model's batcher as one request, inside one admission slot for the
request. Rows carry no user: a canary split does not route them (the live or the named version
scores). The V2 entry admits before it decodes (`infer_decoded`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.errors import BatcherClosed

if TYPE_CHECKING:
    from shared.core.names import ServedNames
    from shared.core.recorder import DecisionRecorder
    from shared.domain.records import Via
    from shared.domain.signature import ModelInfo
    from shared.models.served import Row
    from shared.runtime.admission import Admission

__all__ = ["Inferred", "RowScoring"]


@dataclass(frozen=True, slots=True)
class Inferred:
    """Scores for rows of features, from one model version."""

    model: str
    model_version: str
    scores: list[float]


class RowScoring:
    """Feature rows scored by a served name (a model or an ensemble), in an admission slot."""

    def __init__(self, admission: Admission, names: ServedNames, recorder: DecisionRecorder) -> None:
        self._admission = admission
        self._names = names
        self._recorder = recorder

    async def infer(self, name: str, version: str | None, rows: Sequence[Row], via: Via = "v2") -> Inferred:
        """Scores for feature rows (already in the model's column order), through caches and batches.

        `name` is a model or an ensemble; each row goes through the batcher as one request. Rows
        carry no user: a canary split does not route them (the live or the named version scores).
        """
        return await self.infer_decoded(name, version, lambda _: rows, via)

    async def infer_decoded(
        self, name: str, version: str | None, decode: Callable[[ModelInfo], Sequence[Row]], via: Via = "v2"
    ) -> Inferred:
        """V2's one entry: a slot first, then `decode(info)` (the rows, checked against the model's
        metadata), then the rows scored in that same slot. Decoding is work (a 1 MiB BYTES tensor
        ~130 ms of the event loop): a flood of large bodies is counted and refused before it is decoded."""
        async with self._admission.admitted():
            rows = decode(self._names.metadata(name, version))
            try:
                return await self._infer(name, version, rows, via)
            except BatcherClosed:
                return await self._infer(name, version, rows, via)  # swapped while waiting: the new one answers

    async def _infer(self, name: str, version: str | None, rows: Sequence[Row], via: Via) -> Inferred:
        served = self._names.get(name, version)
        rows_scored = [asyncio.ensure_future(served.score(row)) for row in rows]
        try:
            done = await asyncio.gather(*rows_scored)
        except BaseException:
            for pending in rows_scored:  # NOTE: a refused row fails the request: its siblings stop queueing
                pending.cancel()
            raise
        scores = [d.value.score for d in done]
        if self._recorder.recording:
            self._recorder.record_rows(served, rows, scores, via)
        return Inferred(served.name, served.version, scores)
