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

Control records carry no TTL on purpose: under volatile-lru only keys with a TTL are
evicted, so a pin is never lost to cache pressure (they are a few bytes per model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from shared.cache.tier import L2Tier
from shared.errors import ModelInvalid, ModelNotFound, ScoringError
from shared.models.source import ModelRef, ModelSource, check_ref, version_key
from shared.registry import ModelRegistry
from shared.serving import LoadedModel

__all__ = ["WATCH_S", "Rollout", "latest_key", "pin_key"]

log = logging.getLogger(__name__)

WATCH_S = 1.0  # how often a replica reads the fleet's model records


def latest_key(name: str) -> str:
    return f"models:latest:{name}"


def pin_key(name: str) -> str:
    return f"models:pin:{name}"


class Rollout:
    """Keeps this replica on the fleet's versions: announcements, polling and pins."""

    def __init__(
        self,
        registry: ModelRegistry,
        source: ModelSource,
        l2: L2Tier | None,
        *,
        poll_s: float,
        watch_s: float = WATCH_S,
    ) -> None:
        self._registry = registry
        self._source = source
        self._l2 = l2
        self._poll_s = poll_s
        self._watch_s = watch_s
        self.converged_at: dict[str, float] = {}  # name -> when this replica last changed what it serves

    # -- what the core calls ---------------------------------------------------------

    async def restore_pins(self) -> None:
        """Before the first load: the pins the fleet keeps in Redis apply here too."""
        if self._l2 is None:
            return
        refs = await asyncio.to_thread(self._source.list)
        for name in sorted({ref.name for ref in refs}):
            pin = await self._record(pin_key(name))
            if pin is not None:
                self._registry.pins[name] = str(pin["version"])

    async def installed(self, loaded: LoadedModel) -> None:
        """A version was installed here from an upload: tell the others."""
        await self._announce("activated", loaded.name, loaded.version, loaded.fingerprint)

    async def pin(self, name: str, version: str) -> LoadedModel:
        """Serve `version` of `name` on every replica until released (loaded from the source if need be)."""
        check_ref(name, version)
        await self._ensure_loaded(name, version)
        loaded = await self._registry.pin(name, version)
        if self._l2 is not None:
            self._l2.put(pin_key(name), orjson.dumps({"version": version, "at": time.time()}), None)
            await self._l2.flush()
        await self._announce("pinned", name, version, loaded.fingerprint)
        return loaded

    async def unpin(self, name: str) -> LoadedModel:
        """Release a pin everywhere: the newest version serves again."""
        loaded = await self._registry.unpin(name)
        if self._l2 is not None:
            await self._l2.delete(pin_key(name))
        await self._announce("unpinned", name, loaded.version, loaded.fingerprint)
        return loaded

    # -- the background job -------------------------------------------------------------

    async def run(self) -> None:
        """Follow the fleet's records and poll the source, until cancelled."""
        async with asyncio.TaskGroup() as group:
            if self._l2 is not None:
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
            except Exception:  # NOTE: a source hiccup must not end polling; the next tick retries
                log.warning("model poll failed", exc_info=True)

    async def _watch_forever(self) -> None:
        while True:
            await asyncio.sleep(self._watch_s)
            for name in self._registry.names():
                try:
                    await self._reconcile(name)
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
            await self._ensure_loaded(name, version)
            await self._registry.pin(name, version)
            self._changed(name)
        elif kind == "unpinned" and name in self._registry.pins:
            await self._registry.unpin(name)
            self._changed(name)

    async def _reconcile(self, name: str) -> None:
        """Apply the durable records this replica may have missed while away."""
        if self._l2 is None:
            return
        latest = await self._record(latest_key(name))
        if latest is not None:
            await self._apply({"kind": "activated", **latest})
        pin = await self._record(pin_key(name))
        if pin is not None and self._registry.pins.get(name) != str(pin["version"]):
            await self._apply({"kind": "pinned", "name": name, "version": pin["version"]})
        elif pin is None and name in self._registry.pins:
            await self._apply({"kind": "unpinned", "name": name, "version": self._registry.pins[name]})

    # -- helpers ------------------------------------------------------------------------

    async def _ensure_loaded(self, name: str, version: str) -> None:
        if version in self._registry.loaded_versions(name):
            return
        ref = ModelRef(name, version)
        if ref not in await asyncio.to_thread(self._source.list):
            raise ModelNotFound(f"model {name!r} has no version {version!r} in the model source")
        if await self._registry.load(ref) is None:
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

    async def _announce(self, kind: str, name: str, version: str, fingerprint: str) -> None:
        if self._l2 is None:
            return
        if kind == "activated":
            record = {"name": name, "version": version, "fingerprint": fingerprint, "at": time.time()}
            self._l2.put(latest_key(name), orjson.dumps(record), None)
            await self._l2.flush()

    async def _record(self, key: str) -> dict[str, Any] | None:
        assert self._l2 is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        payload = await self._l2.get(key)
        try:
            record = orjson.loads(payload) if payload else None
        except orjson.JSONDecodeError:
            return None
        return record if isinstance(record, dict) else None
