"""Model files: the metadata contract (`spec`), the ONNX Runtime adapter (`runtime`) and
where files come from (`source`). Which versions serve is `shared.registry`'s concern.

Importing the package is light: onnxruntime and numpy load on first use of `runtime`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

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


__getattr__ = lazy_exports(__name__, _HOMES)  # NOTE: PEP 562: a submodule loads when its name is first used
