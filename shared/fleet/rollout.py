"""Rollout: every replica serves the same model versions within seconds of an upload.

    models:latest:{name}   {"name", "version": "3", "fingerprint", "sha256", "at": epoch s}
    models:pin:{name}      {"version": "2" | null, "sha256", "at": epoch s}

A Blob trigger fires on ONE replica. So the replica that installs a new version (from its
trigger or its poll) records it with its file's SHA-256 in Redis (`models:latest:{name}`),
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

Every record names the file's SHA-256 (`sha256`), and a replica serves a version a record names
only with that very file (`ModelRegistry.vouch`): a file swapped in the model source after it was
pinned or announced (its release record too) is refused by a replica that loads it later (a
restart, a new replica), which keeps serving what it has and says so in readiness.

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
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec

from shared.errors import ControlStoreDown, ModelInvalid, ModelNotFound, ScoringError
from shared.models.registry import ModelRegistry
from shared.models.repository import ModelRef, ModelRepository, check_ref, version_key
from shared.models.served import LoadedModel
from shared.stores.control import Actor, ControlAudit, ControlStore

__all__ = [
    "WATCH_S",
    "LatestRecord",
    "PinRecord",
    "Rollout",
    "WrittenBack",
    "decode_record",
    "latest_key",
    "pin_key",
    "watch",
]

log = logging.getLogger(__name__)

WATCH_S = 1.0  # how often a replica reads the fleet's model records
RECENT_S = 60.0  # readiness names a restored record this long


async def watch(
    registry: ModelRegistry, reconcile: Callable[[str], Awaitable[None]], every_s: float, what: str
) -> None:
    """Every `every_s`, `reconcile(name)` for each model served here, until cancelled: the one watch of
    the fleet's records (pins and newest versions here, shadows and canaries in shared/fleet/traffic.py)."""
    while True:
        await asyncio.sleep(every_s)
        for name in registry.names():
            try:
                await reconcile(name)
            except ControlStoreDown:
                break  # readiness says so (`problem`); the next tick retries every name
            except ScoringError as exc:  # a bad record or file is logged; the next read retries
                log.warning("%s of %s not applied: %s", what, name, exc.detail)


def latest_key(name: str) -> str:
    return f"models:latest:{name}"


def pin_key(name: str) -> str:
    return f"models:pin:{name}"


class LatestRecord(msgspec.Struct, frozen=True):
    """`models:latest:{name}`: the newest version a replica installed, and its file's digest."""

    name: str
    version: str
    fingerprint: str = ""
    sha256: str = ""  # empty in a record written before records named digests: unchecked
    at: float = 0.0


class PinRecord(msgspec.Struct, frozen=True):
    """`models:pin:{name}`: the version pinned on every replica and its file's digest; None: released."""

    version: str | None
    sha256: str = ""
    at: float = 0.0


R = TypeVar("R", bound=msgspec.Struct)


def decode_record(name: str, payload: bytes | None, kind: type[R]) -> R | None:
    """The record, or None where there is none or it is corrupt (a corrupt record reads as absent)."""
    if not payload:
        return None
    try:
        record = msgspec.json.decode(payload, type=kind)
        version = getattr(record, "version", None)
        if version is not None:
            check_ref(name, version)
    except (msgspec.DecodeError, msgspec.ValidationError, ModelInvalid):
        log.warning("a corrupt %s of %r reads as absent: %r", kind.__name__, name, payload[:200])
        return None
    return record


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
        self._refused: dict[str, str] = {}  # name -> why this replica does not follow the fleet's record
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
            records = await self._records(names)
        except ControlStoreDown as exc:
            log.error("the fleet's pins are unknown at start, serving the newest versions: %s", exc.detail)
            return
        for name, (newest, pin) in zip(names, records, strict=True):
            if newest is not None:
                self._registry.vouch(ModelRef(name, newest.version), newest.sha256)
            if pin is not None and pin.version is not None:
                self._registry.set_pin(name, pin.version)
                self._registry.vouch(ModelRef(name, pin.version), pin.sha256)

    async def installed(self, loaded: LoadedModel) -> None:
        """A version was installed here from an upload: tell the others (`ControlStoreDown` if not kept)."""
        if self._control is not None:
            await self._control.write(latest_key(loaded.name), _latest(loaded))

    async def digest(self, name: str, version: str) -> str:
        """The SHA-256 of `name/version`'s file, as a record names it: the loaded file's, else the one
        its release record names, else the source file's."""
        if version in self._registry.loaded_versions(name):
            return self._registry.active(name, version).digest
        ref = ModelRef(name, version)
        release = await asyncio.to_thread(self._source.release, ref)
        if release is not None:
            return release.sha256
        return hashlib.sha256(await asyncio.to_thread(self._source.read, ref)).hexdigest()

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
            sha256 = await self.digest(name, version)
            if self._control is None:
                loaded = await self._pin_here(name, version, sha256)
            else:
                [(_, before)] = await self._records([name])
                await self._control.write(pin_key(name), _encode(PinRecord(version, sha256, time.time())))
                try:
                    loaded = await self._pin_here(name, version, sha256)
                except ScoringError:
                    await self._control.write(pin_key(name), _encode(before or PinRecord(None, at=time.time())))
                    raise
        if by is not None:
            await self.audit.record(by, "pin", name, version=version)
        return loaded

    async def unpin(self, name: str, *, by: Actor | None = None) -> LoadedModel:
        """Release a pin everywhere: the newest version serves again (record first, as for `pin`)."""
        self._registry.active(name)  # NOTE: ModelNotFound before any record is written
        async with self._lock(name):
            if self._control is not None:
                await self._control.write(pin_key(name), _encode(PinRecord(None, at=time.time())))
            loaded = await self._registry.unpin(name)
        await self.audit.record(by, "unpin", name)
        return loaded

    def problem(self) -> str | None:
        """What readiness lists: the control store failing, a lost record written back lately, or a
        record this replica refuses to follow (a file that is not the one the record names)."""
        if (problem := self._written_back.problem(self._control)) is not None:
            return problem
        if self._refused:
            name, detail = next(iter(sorted(self._refused.items())))
            return f"models: the fleet's record of {name!r} not followed here: {detail}"
        return None

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
            except ScoringError as exc:  # the store or the source said no; the next tick retries
                log.warning("model poll incomplete: %s", exc.detail)
            except Exception:  # NOTE: a source hiccup must not end polling; the next tick retries
                log.warning("model poll failed", exc_info=True)

    async def _watch_forever(self) -> None:
        await watch(self._registry, self._reconcile, self._watch_s, "model record")

    async def _reconcile(self, name: str) -> None:
        """Apply the durable records this replica may have missed while away; write back lost ones."""
        if self._control is None:
            return
        async with self._lock(name):  # NOTE: a pin or release here in the meantime would be undone
            try:
                await self._reconcile_records(name)
            except ModelInvalid as exc:
                if self._refused.get(name) != exc.detail:
                    log.error("the fleet's record of %r is not followed here: %s", name, exc.detail)
                self._refused[name] = exc.detail
                raise
        self._refused.pop(name, None)

    async def _reconcile_records(self, name: str) -> None:
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        [(latest, pin)] = await self._records([name])
        if latest is not None:
            await self._follow_latest(name, latest)
        await self._write_back_latest(name, latest)
        held = self._registry.pinned(name)
        if pin is None:
            if held is not None and await self._control.write_if_absent(pin_key(name), _encode(self._held_pin(name))):
                self._written_back.note(f"the pin of {name!r} (version {held}) was missing from Redis; written back")
        elif pin.version is None:
            if held is not None:
                await self._registry.unpin(name)
                self._changed(name)
        elif held != pin.version or pin.version not in self._registry.loaded_versions(name):
            await self._pin_here(name, pin.version, pin.sha256)  # a pin not loaded here says why
            self._changed(name)
        else:
            self._registry.vouch(ModelRef(name, pin.version), pin.sha256)  # the file it serves is the one named

    async def _follow_latest(self, name: str, latest: LatestRecord) -> None:
        """Load the version another replica installed (an echo of one loaded here changes nothing)."""
        ref = ModelRef(name, latest.version)
        self._registry.vouch(ref, latest.sha256)
        if self._older_than_served(name, latest.version):
            return  # a stale record: loading it would only retire it again
        fresh = self._serving(name, latest.version) != latest.fingerprint
        if fresh and await self._registry.load(ref) is not None:
            self._changed(name)

    async def _write_back_latest(self, name: str, latest: LatestRecord | None) -> None:
        """Where the `latest` record is lost, or names a version older than this replica's newest
        (its announcement failed), write this replica's newest."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        versions = self._registry.loaded_versions(name)
        if not versions:
            return
        newest = self._registry.active(name, versions[-1])
        # logged, not listed in readiness: every replica serves on as it did, and each one's
        # poll of the source would catch up anyway (a lost pin is listed: `WrittenBack`)
        if latest is None:
            if await self._control.write_if_absent(latest_key(name), _latest(newest)):
                log.warning("the newest-version record of %r was missing from Redis; written back", name)
        elif version_key(newest.version) > version_key(latest.version):
            await self._control.write(latest_key(name), _latest(newest))
            log.warning(
                "the newest-version record of %r named an older version; version %s written", name, newest.version
            )

    # -- helpers ------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    async def _check_pinnable(self, name: str, version: str) -> None:
        """`ModelNotFound` unless `version` is loaded here or in the model source."""
        self._registry.active(name)  # a name no replica serves
        if version in self._registry.loaded_versions(name):
            return
        if ModelRef(name, version) not in await asyncio.to_thread(self._source.list):
            raise ModelNotFound(f"model {name!r} has no version {version!r} in the model source")

    async def _pin_here(self, name: str, version: str, sha256: str) -> LoadedModel:
        """Pin on this replica, loading the version if need be, only with the file `sha256` names;
        as it was before on failure."""
        before = self._registry.pinned(name)
        self._registry.set_pin(name, version)  # NOTE: first: a version outside MODELS_KEEP_VERSIONS stays loaded
        try:
            self._registry.vouch(ModelRef(name, version), sha256)
            await self._ensure_loaded(name, version)
            return await self._registry.pin(name, version)
        except BaseException:
            self._registry.set_pin(name, before)
            raise

    async def _ensure_loaded(self, name: str, version: str) -> None:
        if version in self._registry.loaded_versions(name):
            return
        await self._check_pinnable(name, version)
        if await self._registry.load(ModelRef(name, version)) is None:
            error = self._registry.last_error(name)
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

    def _held_pin(self, name: str) -> PinRecord:
        """The pin this replica holds, as a record (to write back a lost one)."""
        version = str(self._registry.pinned(name))
        loaded = version in self._registry.loaded_versions(name)
        return PinRecord(version, self._registry.active(name, version).digest if loaded else "", time.time())

    async def _records(self, names: list[str]) -> list[tuple[LatestRecord | None, PinRecord | None]]:
        """Each name's newest-version record and pin, in one read."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; an invariant, never an input check
        payloads = await self._control.read([key for name in names for key in (latest_key(name), pin_key(name))])
        return [
            (decode_record(name, payloads[2 * i], LatestRecord), decode_record(name, payloads[2 * i + 1], PinRecord))
            for i, name in enumerate(names)
        ]


def _encode(record: msgspec.Struct) -> bytes:
    return msgspec.json.encode(record)


def _latest(loaded: LoadedModel) -> bytes:
    return _encode(LatestRecord(loaded.name, loaded.version, loaded.fingerprint, loaded.digest, time.time()))
