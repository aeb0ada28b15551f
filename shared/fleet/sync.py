"""The sync: this replica's shadows and canaries follow the fleet's records, in the background.

    restore()   at start, after the registry loaded: the records the store holds apply here
    run()       until cancelled: every WATCH_S, each model's records read and applied (`reconcile`);
                and as soon as a canary trips here (`Routes.observe`), its abort kept and the
                candidate released

The records are kept like pins (shared/fleet/versions.py): applied at start, read by every
replica every WATCH_S, and a release is a record too (`version` null), so a *missing* record
means "lost" and a replica that holds a shadow or canary writes it back. A version a record
names is held loaded (`ModelRegistry.hold`) beyond MODELS_KEEP_VERSIONS while named, and
released when it no longer is; being held never makes it the version that serves.

An automatic abort is judged on each replica's own traffic; the request path only counts and
trips (no I/O); this loop writes the abort's record, so every replica stops routing to the
candidate within a watch tick. An abort the store refuses waits here (readiness says so) and
is written once the store answers, unless the record changed since.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from shared.errors import ControlStoreDown, ScoringError
from shared.fleet.keys import CanaryRecord, ShadowRecord, canary_key, decode_record, encode, shadow_key
from shared.fleet.routes import Routes
from shared.fleet.versions import WATCH_S, WrittenBack, watch
from shared.models.registry import ModelRegistry
from shared.stores.control import ControlStore

__all__ = ["Sync"]

log = logging.getLogger(__name__)
_Record = TypeVar("_Record", ShadowRecord, CanaryRecord)


class Sync:
    """Keeps `Routes` on the fleet's shadow and canary records, and the store on this replica's aborts."""

    def __init__(
        self, routes: Routes, registry: ModelRegistry, control: ControlStore | None, *, watch_s: float = WATCH_S
    ) -> None:
        self._routes = routes
        self._registry = registry
        self._control = control
        self._watch_s = watch_s
        self._written_back = WrittenBack()

    async def restore(self) -> None:
        """At start, after the registry loaded: the fleet's shadows and splits apply here too.

        With the store down, this replica starts with none, says so in readiness, and applies
        them as soon as its watch reads them.
        """
        if self._control is None:
            return
        for name in self._registry.names():
            try:
                await self.reconcile(name)
            except ControlStoreDown as exc:
                log.error("the fleet's shadows and canaries are unknown at start, serving without: %s", exc.detail)
                return
            except ScoringError as exc:
                log.warning("traffic records of %s not applied: %s", name, exc.detail)

    async def run(self) -> None:
        """Follow the fleet's records every WATCH_S (with a store) and settle each automatic abort
        as soon as it trips, until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self._control is not None:
                group.create_task(watch(self._registry, self.reconcile, self._watch_s, "traffic records"))
            group.create_task(self._settle_tripped())

    def problem(self) -> str | None:
        """The control store failing, else a lost record written back lately, else None."""
        return self._written_back.problem(self._control)

    async def reconcile(self, name: str) -> None:
        """Keep a pending abort, write back lost records, then apply what the store holds."""
        async with self._routes.lock(name):
            await self._reconcile_records(name)

    async def _reconcile_records(self, name: str) -> None:
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        routes, control = self._routes, self._control
        shadow_payload, canary_payload = await control.read([shadow_key(name), canary_key(name)])
        shadow: ShadowRecord | None = decode_record(name, shadow_payload, ShadowRecord)
        canary: CanaryRecord | None = decode_record(name, canary_payload, CanaryRecord)
        canary = await self._keep_pending(name, canary)
        await self._follow(name, shadow_key(name), shadow, routes.shadow_record(name), routes.apply_shadow)
        await self._follow(name, canary_key(name), canary, routes.canary_record(name), routes.apply_canary)
        await routes.hold(name)

    async def _follow(
        self, name: str, key: str, stored: _Record | None, held: _Record | None, apply: Callable[[str, _Record], None]
    ) -> None:
        """The store's record applies here; a missing one, where this replica holds a version, is written back."""
        if stored is not None:
            apply(name, stored)
        elif held is not None and held.version is not None:
            assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
            if await self._control.write_if_absent(key, encode(held)):
                kind = "shadow" if isinstance(held, ShadowRecord) else "canary"
                self._written_back.note(f"the {kind} of {name!r} (version {held.version}) was missing; written back")

    async def _keep_pending(self, name: str, canary: CanaryRecord | None) -> CanaryRecord | None:
        """Write an abort decided here, unless the record changed since (a new canary, another abort)."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        pending = self._routes.pending(name)
        if pending is None:
            return canary
        # NOTE: read, compare, write: not atomic, but a record that changed in the few ms between
        # wins on the next tick anyway; an abort never overwrites a canary set after the one it stops
        if canary is None:
            await self._control.write_if_absent(canary_key(name), encode(pending.record))
        elif canary == pending.tripped:
            await self._control.write(canary_key(name), encode(pending.record))
            canary = pending.record
        self._routes.drop_pending(name)
        return canary

    async def _settle_tripped(self) -> None:
        """Each canary that tripped here: its abort kept in the store, the candidate released."""
        wake = self._routes.wake = asyncio.Event()  # NOTE: made here, inside the running loop
        try:
            while True:
                for name in self._routes.take_tripped():
                    await self._settle(name)
                await wake.wait()
                wake.clear()
        finally:
            self._routes.wake = None

    async def _settle(self, name: str) -> None:
        try:
            async with self._routes.lock(name):
                if self._control is not None:
                    await self._reconcile_records(name)
                else:
                    await self._routes.hold(name)
        except ScoringError as exc:  # the watch retries; readiness names an abort not kept
            log.warning("the abort of %s's canary is not kept yet: %s", name, exc.detail)
