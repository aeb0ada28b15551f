"""Every declared ensemble: read from the model source at start, rebuilt as members change.

An ensemble is activated only when every member resolves to a loaded, validated version
(a member whose file was rejected leaves the ensemble inactive, with the reason). When a
member's active version changes (a reload, a pin) or a version is retired, the ensembles
naming it are rebuilt at once, before the old version drains: requests in flight on the
old build that meet a retired member are resubmitted by the core, like any other request.
"""

from __future__ import annotations

import asyncio
import logging

from shared.domain.answers import EnsembleView
from shared.errors import ModelInvalid, ModelNotFound, ModelSourceError, NotReady
from shared.models.ensembles.declaration import Declaration, parse_declaration
from shared.models.ensembles.ensemble import Ensemble
from shared.models.onnx import OnnxModel
from shared.models.registry import ModelRegistry, RegistryEvent
from shared.models.repository import ModelRef, ModelRepository, version_key
from shared.models.sandbox import Sandbox
from shared.policies import OrtOptions

__all__ = ["ENSEMBLE_FILE", "Ensembles"]

log = logging.getLogger(__name__)

ENSEMBLE_FILE = "ensemble.json"


class Ensembles:
    """Declared ensembles by name; `get` answers the active build."""

    def __init__(
        self,
        registry: ModelRegistry,
        source: ModelRepository,
        ort: OrtOptions,
        warm_rows: int = 8,
        *,
        sandbox: Sandbox | None = None,
    ) -> None:
        self._registry = registry
        self._sandbox = sandbox  # a meta-model is a model file too: tried in a child first
        self._source = source
        self._ort = ort
        self._warm_rows = warm_rows
        self._declared: dict[str, Declaration] = {}
        self._meta: dict[str, OnnxModel] = {}
        self._active: dict[str, Ensemble] = {}
        self.errors: dict[str, str] = {}  # name -> why it is not active

    async def load(self) -> None:
        """Read the newest declaration of each ensemble, then build what can be built."""
        newest: dict[str, ModelRef] = {}
        try:
            refs = await asyncio.to_thread(self._source.ensembles)
        except ModelSourceError as exc:  # the models loaded; ensembles must not take them down
            log.error("ensembles not listed: %s", exc.detail)
            refs = ()
        for ref in refs:
            if ref.name not in newest or version_key(ref.version) > version_key(newest[ref.name].version):
                newest[ref.name] = ref
        for name, ref in sorted(newest.items()):
            try:
                await self._declare(ref)
            except (ModelInvalid, ModelSourceError) as exc:
                self._reject(name, exc.detail)
        self._registry.on("activated", self._follow)
        self._registry.on("retired", self._follow)
        for name in self._declared:
            self._build(name)

    async def _declare(self, ref: ModelRef) -> None:
        data = await asyncio.to_thread(self._source.read_file, ref, ENSEMBLE_FILE)
        declaration = parse_declaration(ref.name, ref.version, data)
        if declaration.meta_model:
            raw = await asyncio.to_thread(self._source.read_file, ref, declaration.meta_model)
            self._meta[ref.name] = await asyncio.to_thread(self._load_meta, raw)
        self._declared[ref.name] = declaration

    def _load_meta(self, data: bytes) -> OnnxModel:
        if self._sandbox is not None:
            self._sandbox.trial(data)
        model = OnnxModel.load(data, self._ort)
        model.warm(self._warm_rows)
        return model

    def _follow(self, event: RegistryEvent) -> None:
        for name, declaration in self._declared.items():
            if any(m.name == event.name for m in declaration.members):
                self._build(name)

    def _build(self, name: str) -> None:
        declaration = self._declared[name]
        try:
            if name in self._registry.names():
                raise ModelInvalid(f"ensemble {name}: a model of that name exists")
            members = [self._registry.active(m.name, m.version) for m in declaration.members]
            built = Ensemble(declaration, members, self._meta.get(name))
        except (ModelInvalid, ModelNotFound, NotReady) as exc:
            self._active.pop(name, None)
            self._reject(name, exc.detail)
            return
        if self.errors.pop(name, None) is not None or name not in self._active:
            shown = ", ".join(f"{m.name}/{m.version}" for m in built.members)
            log.info("ensemble %s/%s active over %s", name, built.version, shown)
        self._active[name] = built

    def _reject(self, name: str, reason: str) -> None:
        if self.errors.get(name) != reason:
            log.error("ensemble %s not active: %s", name, reason)
        self.errors[name] = reason

    def get(self, name: str) -> Ensemble | None:
        """The active build of `name`, or None."""
        return self._active.get(name)

    def declared(self, name: str) -> bool:
        return name in self._declared

    def names(self) -> list[str]:
        return sorted(self._active)

    def describe(self) -> list[EnsembleView]:
        """Each declared ensemble: its active build, or why it has none (`/api/models`)."""
        return [
            EnsembleView(name, self._active[name].describe() if name in self._active else None, self.errors.get(name))
            for name in sorted(set(self._declared) | set(self.errors))
        ]

    def release(self) -> None:
        """Release the meta-models' sessions."""
        for model in self._meta.values():
            model.release()
        self._meta.clear()
        self._active.clear()
