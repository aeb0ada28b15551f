"""Models: the metadata contract (`spec`), the ONNX Runtime adapter (`runtime`),
where files come from (`source`) and which versions serve (`registry`)."""

from shared.models.registry import LoadedModel, ModelRegistry
from shared.models.source import BlobSource, DirectorySource, ModelRef, ModelSource, parse_model_path
from shared.models.spec import Decision, FeatureDef, ModelSpec, Thresholds

__all__ = [
    "BlobSource",
    "Decision",
    "DirectorySource",
    "FeatureDef",
    "LoadedModel",
    "ModelRef",
    "ModelRegistry",
    "ModelSource",
    "ModelSpec",
    "Thresholds",
    "parse_model_path",
]
