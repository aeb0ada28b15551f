"""The operator's shadow and canary commands: shadow, canary, abort, promote, fleet-wide.

Each writes its record first (a write the store refuses raises `ControlStoreDown` and changes
nothing here), then applies it here (`Routes`), then audits who asked. A version that cannot
be loaded here puts the record that was there before back and raises. Every replica's sync
(shared/fleet/sync.py) applies the record within WATCH_S.

A record names its version's file by SHA-256, as a pin does: a replica whose file is another
one neither loads nor routes to it (`ModelRegistry.vouch`).
"""

from __future__ import annotations

import logging
import time

from shared.errors import BadRequest, ControlStoreDown, RolloutConflict, ScoringError
from shared.fleet.canary import AbortReason, aborted
from shared.fleet.keys import CanaryRecord, ShadowRecord, canary_key, decode_record, encode, shadow_key
from shared.fleet.routes import Routes
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import check_ref
from shared.stores.control import Actor, ControlStore
from shared.telemetry import metrics

__all__ = ["Commands"]

log = logging.getLogger(__name__)


class Commands:
    """What the admin plane calls to shadow, canary, abort and promote (`Traffic` hands them here)."""

    def __init__(self, routes: Routes, registry: ModelRegistry, rollout: Rollout, control: ControlStore | None) -> None:
        self._routes = routes
        self._registry = registry
        self._rollout = rollout
        self._control = control

    async def set_shadow(self, name: str, version: str | None, *, by: Actor | None = None) -> None:
        """Shadow `name` with `version` on every replica (None: no shadow). Record first, then the audit."""
        routes = self._routes
        self._registry.active(name)  # NOTE: ModelNotFound before any record is written
        if version is not None:
            check_ref(name, version)
        async with routes.lock(name):
            sha256 = ""
            if version is not None:
                await routes.check_candidate(name, version, "shadow")
                sha256 = await self._rollout.digest(name, version)
            before = routes.shadow_record(name)
            record = ShadowRecord(version, time.time(), sha256)
            await self._write(shadow_key(name), record)
            routes.apply_shadow(name, record)
            try:
                await routes.loaded(name, version)
            except ScoringError:
                await self._put_back(shadow_key(name), before or ShadowRecord(None, time.time()))
                routes.apply_shadow(name, before or ShadowRecord(None, time.time()))
                await routes.hold(name)
                raise
        await self._rollout.audit.record(by, "unshadow" if version is None else "shadow", name, version=version)

    async def set_canary(self, name: str, version: str, weight: float, *, by: Actor | None = None) -> None:
        """Route `weight` (0..1) of `name`'s users to `version` on every replica. Record first.

        `RolloutConflict` when `version` serves (or would, once loaded): pin the live version
        first (POST /api/models/{name}/activate), so that an upload does not replace it.
        `ModelNotFound` when the model source has no such version.
        """
        if not 0.0 <= weight <= 1.0:  # NaN fails too
            raise BadRequest(f"a canary weight is a share within 0..1, got {weight!r}")
        routes = self._routes
        self._registry.active(name)
        check_ref(name, version)
        async with routes.lock(name):
            await routes.check_candidate(name, version, "canary")
            before = await self._current_canary(name)
            last = before.last_abort if before is not None else None
            sha256 = await self._rollout.digest(name, version)
            record = CanaryRecord(version, float(weight), time.time(), None, last, sha256)
            await self._set_canary_record(name, record)
            try:
                await routes.loaded(name, version)
            except ScoringError:
                kept = before or CanaryRecord(None, 0.0, time.time(), None, last)
                await self._put_back(canary_key(name), kept)
                routes.apply_canary(name, kept)
                await routes.hold(name)
                raise
        await self._rollout.audit.record(by, "canary", name, version=version, weight=float(weight))

    async def abort(self, name: str, reason: AbortReason = "api", *, by: Actor | None = None) -> None:
        """Stop `name`'s canary on every replica: weight 0, the record keeps the abort and why (`by`: audited)."""
        routes = self._routes
        self._registry.active(name)
        async with routes.lock(name):
            current, version = await self._running_canary(name, "abort")
            if current.aborted is not None:
                return  # aborted already: the first abort's reason stands
            await self._set_canary_record(name, aborted(current, reason, time.time()))
            metrics.canary_abort(name, reason)
            await routes.hold(name)
        await self._rollout.audit.record(by, "abort", name, version=version)

    async def promote(self, name: str, *, by: Actor | None = None) -> None:
        """The candidate becomes the pinned version on every replica (`Rollout.pin`), then the split is cleared.

        `RolloutConflict` when there is no running canary (an aborted one is pinned, if at all,
        through POST /api/models/{name}/activate). If the store keeps the pin but not the
        cleared split, this raises with the candidate serving everyone; promoting again clears it.
        """
        routes = self._routes
        self._registry.active(name)
        async with routes.lock(name):
            current, version = await self._running_canary(name, "promote")
            if current.aborted is not None:
                raise RolloutConflict(
                    f"the canary {name}/{version} was aborted ({current.aborted.reason}): set it again "
                    f"(or pin it: POST /api/models/{name}/activate)"
                )
            await self._rollout.pin(name, version)
            await self._set_canary_record(name, CanaryRecord(None, 0.0, time.time(), None, current.last_abort))
            shadow = routes.shadow_record(name)
            if shadow is not None and shadow.version == version:  # it serves now: a shadow of
                released = ShadowRecord(None, time.time())  # itself would score every event twice alike
                await self._write(shadow_key(name), released)
                routes.apply_shadow(name, released)
            await routes.hold(name)
        await self._rollout.audit.record(by, "promote", name, version=version)

    async def _current_canary(self, name: str) -> CanaryRecord | None:
        """The canary record as the store holds it now (this replica's where there is no store)."""
        if self._control is None:
            return self._routes.canary_record(name)
        (payload,) = await self._control.read([canary_key(name)])
        current: CanaryRecord | None = decode_record(name, payload, CanaryRecord)
        return current if current is not None else self._routes.canary_record(name)

    async def _running_canary(self, name: str, command: str) -> tuple[CanaryRecord, str]:
        """The canary record and its version; `RolloutConflict` when `name` has none to `command`."""
        current = await self._current_canary(name)
        if current is None or current.version is None:
            raise RolloutConflict(f"model {name!r} has no canary to {command}")
        return current, current.version

    async def _set_canary_record(self, name: str, record: CanaryRecord) -> None:
        """Write `record`, then apply it here: the operator's record replaces an abort not yet kept."""
        await self._write(canary_key(name), record)
        self._routes.drop_pending(name)
        self._routes.apply_canary(name, record)

    async def _write(self, key: str, record: ShadowRecord | CanaryRecord) -> None:
        if self._control is not None:
            await self._control.write(key, encode(record))

    async def _put_back(self, key: str, record: ShadowRecord | CanaryRecord) -> None:
        try:
            await self._write(key, record)
        except ControlStoreDown as exc:  # the load error is the one to report; the watch reapplies
            log.error("the record %s could not be put back: %s", key, exc.detail)
