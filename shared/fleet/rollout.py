"""Rollout: every replica serves the same model versions within seconds of an upload.

A Blob trigger fires on ONE replica. So the replica that installs a new version (from its
trigger or its poll) records `{name, version, fingerprint}` in Redis (`models:latest:{name}`),
and every replica reads those records every WATCH_S (one MGET of a few bytes per model):
a new version reaches every replica within about a second plus its load time, and a
replica that was away or disconnected catches up by construction. Every replica also polls
its model source every MODEL_POLL_SECONDS: the safety net, and with no Redis the only way.

NOTE: a pub/sub channel was built first and dropped: redis-py's subscriber connection did
not always honour cancellation at shutdown (the process hung on close, reproduced in
tests), and a one-second record read converges as fast as the load it triggers allows. Each replica reads the file from its own source and runs it
through its registry (validate, warm, swap); an echo of a version it already serves is a
no-op. Pins (`models:pin:{name}`) are kept in Redis too, so they survive restarts and hold
on every replica until released.

The records live in the control store (shared/stores/control.py), whose writes raise: a pin, a
release or a version record that Redis did not keep is a 503 naming Redis, and nothing
changes on this replica that it could not announce. A release is a record too (`version`
null), not a deletion, so a *missing* pin record means "lost" (a FLUSHDB, a failover to an
empty replica), never "released": a replica that holds a pin whose record is gone writes
it back, and one that serves a version newer than a lost `latest` record writes that
back, and readiness says so. Records carry no TTL: under volatile-lru only keys with a
TTL are evicted, so cache pressure never removes one (they are a few bytes per model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from shared.errors import ControlStoreDown, ModelInvalid, ModelNotFound, ScoringError
from shared.models.registry import ModelRegistry
from shared.models.repository import ModelRef, ModelRepository, check_ref, version_key
from shared.models.served import LoadedModel
from shared.stores.control import Actor, ControlAudit, ControlStore

__all__ = ["WATCH_S", "Rollout", "WrittenBack", "latest_key", "pin_key"]

log = logging.getLogger(__name__)

WATCH_S = 1.0  # how often a replica reads the fleet's model records
RECENT_S = 60.0  # readiness names a restored record this long


def latest_key(name: str) -> str:
    return f"models:latest:{name}"


def pin_key(name: str) -> str:
    return f"models:pin:{name}"


class WrittenBack:
    """The last lost record a replica wrote back (pins, shadows, canaries), named in readiness for RECENT_S."""

    def __init__(self) -> None:
        self._last: tuple[str, float] | None = None  # what was written back, and when

    def note(self, what: str) -> None:
        log.warning("%s", what)
        self._last = (what, time.monotonic())

    def problem(self, control: ControlStore | None) -> str | None:
        """The control store failing, else a record written back lately, else None."""
        if control is not None and (failing := control.problem()) is not None:
            return failing
        if self._last is not None and time.monotonic() - self._last[1] <= RECENT_S:
            return f"control: {self._last[0]}"
        return None


class Rollout:
    """Keeps this replica on the fleet's versions: announcements, polling and pins."""

    def __init__(
        self,
        registry: ModelRegistry,
        source: ModelRepository,
        control: ControlStore | None,
        *,
        poll_s: float,
        watch_s: float = WATCH_S,
    ) -> None:
        self._registry = registry
        self._source = source
        self._control = control
        self._poll_s = poll_s
        self._watch_s = watch_s
        self.converged_at: dict[str, float] = {}  # name -> when this replica last changed what it serves
        self._written_back = WrittenBack()
        self._locks: dict[str, asyncio.Lock] = {}  # per model: pins, releases and the watch, one at a time
        self.audit = ControlAudit(control)  # who pinned, released, shadowed... (shared with Traffic)

    # -- what the core calls ---------------------------------------------------------

    async def restore_pins(self) -> None:
        """Before the first load: the pins the fleet keeps apply here too.

        With the store down, this replica starts on the newest versions, says so in readiness,
        and applies the pins as soon as its watch reads them.
        """
        if self._control is None:
            return
        refs = await asyncio.to_thread(self._source.list)
        names = sorted({ref.name for ref in refs})
        try:
            pins = await self._records([pin_key(name) for name in names])
        except ControlStoreDown as exc:
            log.error("the fleet's pins are unknown at start, serving the newest versions: %s", exc.detail)
            return
        for name, pin in zip(names, pins, strict=True):
            if pin is not None and pin.get("version") is not None:
                self._registry.pins[name] = str(pin["version"])

    async def installed(self, loaded: LoadedModel) -> None:
        """A version was installed here from an upload: tell the others (`ControlStoreDown` if not kept)."""
        if self._control is not None:
            await self._control.write(latest_key(loaded.name), _latest(loaded))

    async def pin(self, name: str, version: str, *, by: Actor | None = None) -> LoadedModel:
        """Serve `version` of `name` on every replica until released (loaded from the source if need be).

        The record is written first: if the store does not keep it, this raises and nothing
        serves differently here. If this replica then cannot load the version, the record
        that was there before is put back and the error raised. `by`: who asked, and why
        (audited; None: a step of another action, audited as that action).
        """
        check_ref(name, version)
        async with self._lock(name):
            await self._check_pinnable(name, version)
            if self._control is None:
                loaded = await self._pin_here(name, version)
            else:
                (before,) = await self._records([pin_key(name)])
                await self._control.write(pin_key(name), _pin(version))
                try:
                    loaded = await self._pin_here(name, version)
                except ScoringError:
                    kept = before.get("version") if before is not None else None
                    await self._control.write(pin_key(name), _pin(None if kept is None else str(kept)))
                    raise
        if by is not None:
            await self.audit.record(by, "pin", name, version=version)
        return loaded

    async def unpin(self, name: str, *, by: Actor | None = None) -> LoadedModel:
        """Release a pin everywhere: the newest version serves again (record first, as for `pin`)."""
        self._registry.active(name)  # NOTE: ModelNotFound before any record is written
        async with self._lock(name):
            if self._control is not None:
                await self._control.write(pin_key(name), _pin(None))
            loaded = await self._registry.unpin(name)
        await self.audit.record(by, "unpin", name)
        return loaded

    def problem(self) -> str | None:
        """What readiness lists: the control store failing, or a lost record written back lately."""
        return self._written_back.problem(self._control)

    # -- the background job -------------------------------------------------------------

    async def run(self) -> None:
        """Follow the fleet's records and poll the source, until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self._control is not None:
                group.create_task(self._watch_forever())
            if self._poll_s > 0:
                group.create_task(self._poll_forever())

    async def poll_once(self) -> None:
        """Catch up with the source and the fleet's records: newer versions, re-uploads, pins."""
        refs = await asyncio.to_thread(self._source.list)
        newest: dict[str, str] = {}
        for ref in refs:
            if ref.name not in newest or version_key(ref.version) > version_key(newest[ref.name]):
                newest[ref.name] = ref.version
        for name, version in newest.items():
            if version not in self._registry.loaded_versions(name):
                loaded = await self._registry.load(ModelRef(name, version))
                if loaded is not None:
                    self._changed(name)
                    await self.installed(loaded)
        for name in newest:
            await self._reconcile(name)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.poll_once()
            except ScoringError as exc:  # NOTE: the store or the source said no; the next tick retries
                log.warning("model poll incomplete: %s", exc.detail)
            except Exception:  # NOTE: a source hiccup must not end polling; the next tick retries
                log.warning("model poll failed", exc_info=True)

    async def _watch_forever(self) -> None:
        while True:
            await asyncio.sleep(self._watch_s)
            for name in self._registry.names():
                try:
                    await self._reconcile(name)
                except ControlStoreDown:
                    break  # NOTE: readiness says so (`problem`); the next tick retries every name
                except ScoringError as exc:  # NOTE: a bad record or file is logged; the next read retries
                    log.warning("model record for %s not applied: %s", name, exc.detail)

    async def _apply(self, event: dict[str, Any]) -> None:
        name, version, kind = str(event["name"]), str(event["version"]), event["kind"]
        check_ref(name, version)
        if kind == "activated":
            if self._older_than_served(name, version):
                return  # NOTE: a stale record: loading it would only retire it again
            fresh = self._serving(name, version) != event.get("fingerprint")
            if fresh and await self._registry.load(ModelRef(name, version)) is not None:
                self._changed(name)
        elif kind == "pinned":
            await self._pin_here(name, version)
            self._changed(name)
        elif kind == "unpinned" and name in self._registry.pins:
            await self._registry.unpin(name)
            self._changed(name)

    async def _reconcile(self, name: str) -> None:
        """Apply the durable records this replica may have missed while away; write back lost ones."""
        if self._control is None:
            return
        async with self._lock(name):  # NOTE: a pin or release here in the meantime would be undone
            await self._reconcile_records(name)

    async def _reconcile_records(self, name: str) -> None:
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        latest, pin = await self._records([latest_key(name), pin_key(name)])
        if latest is not None:
            await self._apply({"kind": "activated", **latest})
        await self._write_back_latest(name, latest)
        held = self._registry.pins.get(name)
        if pin is None:
            if held is not None and await self._control.write_if_absent(pin_key(name), _pin(held)):
                self._written_back.note(f"the pin of {name!r} (version {held}) was missing from Redis; written back")
        elif pin.get("version") is None:
            if held is not None:
                await self._apply({"kind": "unpinned", "name": name, "version": held})
        elif held != str(pin["version"]):
            await self._apply({"kind": "pinned", "name": name, "version": pin["version"]})

    async def _write_back_latest(self, name: str, latest: dict[str, Any] | None) -> None:
        """Where the `latest` record is lost, or names a version older than this replica's newest
        (its announcement failed), write this replica's newest."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        versions = self._registry.loaded_versions(name)
        if not versions:
            return
        newest = self._registry.active(name, versions[-1])
        # NOTE: logged, not listed in readiness: every replica serves on as it did, and each one's
        # poll of the source would catch up anyway (a lost pin is listed: `WrittenBack`)
        if latest is None:
            if await self._control.write_if_absent(latest_key(name), _latest(newest)):
                log.warning("the newest-version record of %r was missing from Redis; written back", name)
        elif version_key(newest.version) > version_key(str(latest.get("version", ""))):
            await self._control.write(latest_key(name), _latest(newest))
            log.warning(
                "the newest-version record of %r named an older version; version %s written", name, newest.version
            )

    # -- helpers ------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _check_pinnable(self, name: str, version: str) -> None:
        """`ModelNotFound` unless `version` is loaded here or in the model source."""
        self._registry.active(name)  # NOTE: a name no replica serves
        if version in self._registry.loaded_versions(name):
            return
        if ModelRef(name, version) not in await asyncio.to_thread(self._source.list):
            raise ModelNotFound(f"model {name!r} has no version {version!r} in the model source")

    async def _pin_here(self, name: str, version: str) -> LoadedModel:
        """Pin on this replica, loading the version if need be; as it was before on failure."""
        before = self._registry.pins.get(name)
        self._registry.pins[name] = version  # NOTE: first: a version outside MODELS_KEEP_VERSIONS stays loaded
        try:
            await self._ensure_loaded(name, version)
            return await self._registry.pin(name, version)
        except BaseException:
            if before is None:
                self._registry.pins.pop(name, None)
            else:
                self._registry.pins[name] = before
            raise

    async def _ensure_loaded(self, name: str, version: str) -> None:
        if version in self._registry.loaded_versions(name):
            return
        await self._check_pinnable(name, version)
        if await self._registry.load(ModelRef(name, version)) is None:
            error = self._registry.last_error.get(name)
            raise ModelInvalid(error.reason if error else f"{name}/{version} cannot be loaded")

    def _serving(self, name: str, version: str) -> str | None:
        try:
            return self._registry.active(name, version).fingerprint
        except ScoringError:
            return None

    def _older_than_served(self, name: str, version: str) -> bool:
        loaded = self._registry.loaded_versions(name)
        return bool(loaded) and version not in loaded and version_key(version) < version_key(loaded[0])

    def _changed(self, name: str) -> None:
        self.converged_at[name] = time.time()

    async def _records(self, keys: list[str]) -> list[dict[str, Any] | None]:
        assert self._control is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        return [_decoded(payload) for payload in await self._control.read(keys)]


def _decoded(payload: bytes | None) -> dict[str, Any] | None:
    try:
        record = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        return None  # NOTE: a corrupt record reads as absent
    return record if isinstance(record, dict) else None


def _latest(loaded: LoadedModel) -> bytes:
    return orjson.dumps(
        {"name": loaded.name, "version": loaded.version, "fingerprint": loaded.fingerprint, "at": time.time()}
    )


def _pin(version: str | None) -> bytes:
    """A pin record; `None`: released (a record too, so that a missing one means lost)."""
    return orjson.dumps({"version": version, "at": time.time()})
