"""The V2 data plane without a transport: REST and gRPC decode into these, call it, encode.

Requests are checked against the model's metadata before anything runs: one input, the
model's name and datatype (FP32), shape `[rows, features]` with 1..MAX_BATCH_ITEMS rows of
finite values, and only outputs the model gives. The rows then go through the core's
`infer` (the same batchers and caches as `/api/score`), each row a request of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.adapters.oip.codec import Tensor
from shared.domain.answers import V2ModelMetadata, V2Parameters, V2ServerMetadata, V2Tensor
from shared.domain.signature import SCORE_OUTPUT, ModelInfo, TensorInfo
from shared.errors import BadRequest

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = ["SERVER_NAME", "DataPlane", "InferRequest", "InferResponse", "NamedTensor"]

SERVER_NAME = "fraud-scoring"
SERVER_VERSION = "1.0"


@dataclass(frozen=True, slots=True)
class NamedTensor:
    """A request's input or a response's output: a V2 tensor by name, decoded to numpy."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: Tensor


@dataclass(frozen=True, slots=True)
class InferRequest:
    """One inference request, decoded; `outputs` None: every output."""

    model: str
    version: str | None
    inputs: list[NamedTensor]
    outputs: list[str] | None = None
    id: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferResponse:
    model: str
    version: str
    outputs: list[NamedTensor]
    id: str = ""


class DataPlane:
    """V2 over the core: health, metadata and inference."""

    extensions = ("binary_tensor_data",)

    def __init__(self, core: ScoringService) -> None:
        self.core = core
        self._max_rows = core.limits.max_batch_items

    def server_metadata(self) -> V2ServerMetadata:
        return V2ServerMetadata(SERVER_NAME, SERVER_VERSION, list(self.extensions))

    def ready(self) -> bool:
        return self.core.readiness().ready

    def model_metadata(self, name: str, version: str | None) -> V2ModelMetadata:
        info = self.core.metadata(name, version or None)
        inputs, outputs = _tensors(info.inputs), _tensors(info.outputs)
        return V2ModelMetadata(info.name, info.versions, info.platform, inputs, outputs, V2Parameters(info.features))

    def model_ready(self, name: str, version: str | None) -> bool:
        return self.core.model_ready(name, version or None)

    def check_head(self, model: str, version: str | None, name: str, datatype: str, shape: tuple[int, ...]) -> None:
        """Refuse an input the model cannot take from its head alone, before its data is decoded
        (a BYTES tensor sent to an FP32 model costs nothing to refuse here)."""
        info = self.core.metadata(model, version or None)
        (expected,) = info.inputs
        if name != expected.name:
            raise BadRequest(f"unknown input {name!r}: model {info.name!r} takes {expected.name!r}")
        if datatype != expected.datatype:
            raise BadRequest(f"input {name!r} is {datatype}; the model takes {expected.datatype}")
        if len(shape) != 2 or shape[1] != expected.shape[1] or not 1 <= shape[0] <= self._max_rows:
            raise BadRequest(
                f"input {name!r} has shape {list(shape)}; expected [rows, {expected.shape[1]}] "
                f"with 1..{self._max_rows} rows (columns: {', '.join(info.features)})"
            )

    async def infer(self, request: InferRequest) -> InferResponse:
        info = self.core.metadata(request.model, request.version or None)
        matrix = self._rows(request, info)
        unknown = [o for o in request.outputs or () if o != SCORE_OUTPUT]
        if unknown:
            raise BadRequest(f"unknown output {unknown[0]!r}: model {info.name!r} gives {SCORE_OUTPUT!r}")
        done = await self.core.infer(request.model, request.version or None, list(matrix))
        scores = np.array(done.scores, dtype=np.float32).reshape(-1, 1)
        output = NamedTensor(SCORE_OUTPUT, "FP32", scores.shape, scores)
        return InferResponse(done.model, done.model_version, [output], request.id)

    def _rows(self, request: InferRequest, info: ModelInfo) -> Tensor:
        (expected,) = info.inputs
        if len(request.inputs) != 1:
            raise BadRequest(f"model {info.name!r} takes one input ({expected.name!r}), got {len(request.inputs)}")
        (given,) = request.inputs
        if given.name != expected.name:
            raise BadRequest(f"unknown input {given.name!r}: model {info.name!r} takes {expected.name!r}")
        if given.datatype != expected.datatype:
            raise BadRequest(f"input {given.name!r} is {given.datatype}; the model takes {expected.datatype}")
        width = expected.shape[1]
        rows = given.shape[0] if len(given.shape) == 2 else 0
        if len(given.shape) != 2 or given.shape[1] != width or not 1 <= rows <= self._max_rows:
            raise BadRequest(
                f"input {given.name!r} has shape {list(given.shape)}; expected [rows, {width}] "
                f"with 1..{self._max_rows} rows (columns: {', '.join(info.features)})"
            )
        matrix = np.ascontiguousarray(given.data, dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise BadRequest(f"input {given.name!r} holds a value that is not finite")
        return matrix


def _tensors(infos: list[TensorInfo]) -> list[V2Tensor]:
    return [V2Tensor(t.name, t.datatype, list(t.shape)) for t in infos]
