"""What a served model takes and gives: tensors by name, datatype and shape.

Every model this service serves takes one FP32 input of `[-1, features]` (rows of its
feature columns, in order) and gives one score per row. The datatype names are the Open
Inference Protocol's (`FP32`, `INT64`, `BYTES`...), which the protocol adapters speak; the
core states them once here so no adapter works them out from a model's parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.domain.answers import Platform
from shared.domain.spec import ModelSpec

__all__ = ["SCORE_OUTPUT", "ModelInfo", "TensorInfo", "tensors"]

SCORE_OUTPUT = "score"  # the output every served model gives: one score per input row, in [0, 1]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One input or output tensor: its name, datatype and shape (-1: a variable dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model name as served: its loaded versions, platform, tensors and the input's columns."""

    name: str
    versions: list[str]
    platform: Platform
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    features: list[str]


def tensors(spec: ModelSpec) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs and outputs of a model with this spec."""
    return [TensorInfo(spec.input_name, "FP32", (-1, spec.width))], [TensorInfo(SCORE_OUTPUT, "FP32", (-1, 1))]
