"""The V2 data plane without a transport: REST and gRPC decode into these, call it, encode.

The core admits a request before it is decoded (`ScoringService.infer_decoded`); each input
is then checked against the model's metadata from its head, before its data is decoded: the
model's name and datatype (FP32), shape `[rows, features]` with 1..MAX_BATCH_ITEMS rows; then
one input, of finite values, and only outputs the model gives. The rows go through the same
batchers and caches as `/api/score`, each row a request of its own, in the same slot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from shared.adapters.oip.codec import Tensor
from shared.domain.answers import V2ModelMetadata, V2Parameters, V2ServerMetadata, V2Tensor
from shared.domain.signature import SCORE_OUTPUT, ModelInfo, TensorInfo
from shared.errors import BadRequest

if TYPE_CHECKING:
    from shared.core.service import ScoringService
    from shared.models.served import Row

__all__ = ["SERVER_NAME", "Check", "DataPlane", "InferRequest", "InferResponse", "NamedTensor"]

SERVER_NAME = "fraud-scoring"
SERVER_VERSION = "1.0"
Check = Callable[[str, str, tuple[int, ...]], None]  # (name, datatype, shape): refuses an input from its head


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
    binary_outputs: bool = False  # REST's binary-data extension: outputs asked for as binary


@dataclass(frozen=True, slots=True)
class InferResponse:
    model: str
    version: str
    outputs: list[NamedTensor]
    id: str = ""
    binary: bool = False  # sent binary, as the request asked (REST)


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

    async def infer(self, model: str, version: str | None, decode: Callable[[Check], InferRequest]) -> InferResponse:
        """The core admits the request first; then `decode(check)` runs inside its slot (decoding is
        work), `check(name, datatype, shape)` refusing an input from its head before its data is
        decoded (a BYTES tensor sent to an FP32 model costs nothing to refuse)."""
        asked: list[InferRequest] = []

        def rows(info: ModelInfo) -> list[Row]:
            request = decode(partial(self._check_head, info))
            asked.append(request)
            return list(self._rows(request, info))

        done = await self.core.infer_decoded(model, version or None, rows)
        (request,) = asked
        scores = np.array(done.scores, dtype=np.float32).reshape(-1, 1)
        output = NamedTensor(SCORE_OUTPUT, "FP32", scores.shape, scores)
        return InferResponse(done.model, done.model_version, [output], request.id, request.binary_outputs)

    def _check_head(self, info: ModelInfo, name: str, datatype: str, shape: tuple[int, ...]) -> None:
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

    def _rows(self, request: InferRequest, info: ModelInfo) -> Tensor:
        """The one input's rows (its name, datatype and shape passed `_check_head` as it was decoded)."""
        if len(request.inputs) != 1:
            raise BadRequest(
                f"model {info.name!r} takes one input ({info.inputs[0].name!r}), got {len(request.inputs)}"
            )
        unknown = [o for o in request.outputs or () if o != SCORE_OUTPUT]
        if unknown:
            raise BadRequest(f"unknown output {unknown[0]!r}: model {info.name!r} gives {SCORE_OUTPUT!r}")
        (given,) = request.inputs
        matrix = np.ascontiguousarray(given.data, dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise BadRequest(f"input {given.name!r} holds a value that is not finite")
        return matrix


def _tensors(infos: list[TensorInfo]) -> list[V2Tensor]:
    return [V2Tensor(t.name, t.datatype, list(t.shape)) for t in infos]
