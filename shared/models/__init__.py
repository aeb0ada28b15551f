"""Model files: the metadata contract (`spec`), the ONNX Runtime adapter (`runtime`) and
where files come from (`source`). Which versions serve is `shared.registry`'s concern.

Importing the package is light: onnxruntime and numpy load on first use of `runtime`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.models.runtime import OnnxModel
    from shared.models.source import (
        BlobSource,
        DirectorySource,
        ModelRef,
        ModelSource,
        parse_model_path,
    )
    from shared.models.spec import Decision, FeatureDef, ModelSpec, Thresholds

__all__ = [
    "BlobSource",
    "Decision",
    "DirectorySource",
    "FeatureDef",
    "ModelRef",
    "ModelSource",
    "ModelSpec",
    "OnnxModel",
    "Thresholds",
    "parse_model_path",
]

_HOMES = {
    "OnnxModel": "runtime",
    "BlobSource": "source",
    "DirectorySource": "source",
    "ModelRef": "source",
    "ModelSource": "source",
    "parse_model_path": "source",
    "Decision": "spec",
    "FeatureDef": "spec",
    "ModelSpec": "spec",
    "Thresholds": "spec",
}


def __getattr__(name: str) -> Any:  # NOTE: PEP 562: a submodule loads when its name is first used
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
