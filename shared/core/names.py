"""The names this process serves: each model's versions (the registry) and each ensemble.

A served name is `Served` (shared/models/served.py): a model version or an ensemble; both score a row,
map an event, and carry a spec (name, version, thresholds, features), which is all the data plane asks. The data plane
may name a model's version, but only its live one (a scoring key never chooses its judge).
"""

from __future__ import annotations

from shared.domain.answers import EnsembleView, ModelView
from shared.domain.signature import ModelInfo, tensors
from shared.errors import ModelNotFound, NotReady
from shared.models.ensembles.catalog import Ensembles
from shared.models.registry import ModelRegistry
from shared.models.served import Served

__all__ = ["ServedNames"]


class ServedNames:
    """Looks up what serves a name: a model version of the registry, else a declared ensemble."""

    def __init__(self, registry: ModelRegistry, ensembles: Ensembles | None) -> None:
        self._registry = registry
        self._ensembles = ensembles

    def get(self, name: str, version: str | None = None) -> Served:
        """The model version or the ensemble that serves `name`; `ModelNotFound` if none does.

        A data-plane call may name a version, but only the live one: a candidate or an older version
        scores through a shadow or a canary, which the admin key sets (the caller must not choose its judge).
        """
        try:
            live = self._registry.active(name)
        except ModelNotFound:
            live = None
        if live is not None:
            if version is not None and version != live.version:
                raise ModelNotFound(
                    f"{name}/{version} is not the live version of {name!r} ({live.version}): a scoring call scores "
                    "with what is live; a candidate is tried through a shadow or a canary (the admin key)"
                )
            return live
        try:
            return self._registry.active(name, version)
        except ModelNotFound:
            ensemble = self._ensembles.get(name) if self._ensembles is not None else None
            if ensemble is None:
                if self._ensembles is not None and self._ensembles.declared(name):
                    raise ModelNotFound(
                        f"ensemble {name!r} is not active: {self._ensembles.errors.get(name)}"
                    ) from None
                raise
            if version is not None and version != ensemble.version:
                raise ModelNotFound(f"ensemble {name!r} has no version {version!r}") from None
            return ensemble

    def describe(self) -> list[ModelView | EnsembleView]:
        """Every served name: the models, then the declared ensembles."""
        ensembles = self._ensembles.describe() if self._ensembles is not None else []
        return [*self._registry.describe(), *ensembles]

    def metadata(self, name: str, version: str | None = None) -> ModelInfo:
        """What `name` (a model or an ensemble) takes and gives; `ModelNotFound` if not served."""
        served = self.get(name, version)
        inputs, outputs = tensors(served.spec)
        features = [f.name for f in served.spec.features]
        versions = self._registry.loaded_versions(name) or [served.version]  # an ensemble: its one build
        return ModelInfo(name, versions, served.platform, inputs, outputs, features)

    def ready(self, name: str, version: str | None = None) -> bool:
        """Whether `name` (at `version`) would serve a request now."""
        try:
            self.get(name, version)
        except (ModelNotFound, NotReady):
            return False
        return True
