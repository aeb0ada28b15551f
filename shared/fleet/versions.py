"""Versions: every replica serves the same model versions within seconds of an upload (`Rollout`).

It follows three records of the control store (their shapes and keys: shared/fleet/keys.py):
`models:latest:{name}` (the newest version installed), `models:pin:{name}` (the version pinned
fleet-wide) and `models:quarantine:{name}` (versions no replica runs again).

A version whose run trips a bound on one replica (shared/models/bounds.py) is quarantined there
at once (shared/models/registry.py); this replica then adds it to `models:quarantine:{name}`,
and every replica's watch takes it out within WATCH_S: one hostile event costs the fleet one
stopped run, not one per replica. The record only grows (a version's file never changes:
publish a fixed file as a new version); a replica that holds a quarantine the record lacks
(a lost record, two replicas writing at once) writes the union back.

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

import msgspec

from shared.domain.spec import Thresholds
from shared.errors import ControlStoreDown, ModelInvalid, ModelNotFound, RolloutConflict, ScoringError, WarmupStarved
from shared.fleet.keys import (
    LatestRecord,
    PinRecord,
    QuarantineRecord,
    decode_record,
    encode,
    latest_key,
    legacy,
    pin_key,
    quarantine_key,
)
from shared.models.registry import ModelRegistry, RegistryEvent
from shared.models.repository import ModelRef, ModelRepository, check_ref, version_key
from shared.models.served import LoadedModel
from shared.stores.control import Actor, ControlAudit, ControlStore

__all__ = ["WATCH_S", "Rollout", "WrittenBack", "record_pin", "watch", "weigh_promote"]

log = logging.getLogger(__name__)

WATCH_S = 1.0  # how often a replica reads the fleet's model records
RECENT_S = 60.0  # readiness names a restored record this long


async def watch(
    registry: ModelRegistry, reconcile: Callable[[str], Awaitable[None]], every_s: float, what: str
) -> None:
    """Every `every_s`, `reconcile(name)` for each model served here, until cancelled: the one watch of
    the fleet's records (pins and newest versions here, shadows and canaries in shared/fleet/sync.py)."""
    while True:
        await asyncio.sleep(every_s)
        for name in registry.names():
            try:
                await reconcile(name)
            except ControlStoreDown:
                break  # readiness says so (`problem`); the next tick retries every name
            except ScoringError as exc:  # a bad record or file is logged; the next read retries
                log.warning("%s of %s not applied: %s", what, name, exc.detail)


def weigh_promote(
    name: str,
    version: str,
    new: Thresholds,
    reach: float | None,
    live: tuple[str, Thresholds] | None,
    allow_never_decline: bool,
) -> str | None:
    """A promote's thresholds against the live version's (`live`: its version and thresholds, None when
    unknown or the same version): the change, stated, or None. `RolloutConflict` for a version that could
    never decline (decline >= 1, or above `reach`, the highest score its trial produced) unless allowed."""
    if (new.decline >= 1.0 or (reach is not None and new.decline > reach)) and not allow_never_decline:
        seen = "" if reach is None else f", above every score its trial produced (at most {reach:.4g})"
        raise RolloutConflict(
            f"{name}/{version} could never decline: its decline threshold is {new.decline:g}{seen}. "
            'Promote it anyway only on purpose: {"allow_never_decline": true} (--allow-never-decline)'
        )
    if live is None or (live[1].review, live[1].decline) == (new.review, new.decline):
        return None
    old = live[1]
    return (
        f"thresholds change: review {old.review:g} → {new.review:g}, decline {old.decline:g} → {new.decline:g} "
        f"(from {name}/{live[0]})"
    )


async def record_pin(control: ControlStore, name: str, version: str | None, sha256: str = "") -> None:
    """Write `models:pin:{name}`: every replica's watch serves `version` (None: releases) within WATCH_S."""
    await control.write(pin_key(name), encode(PinRecord(version, sha256, time.time())))


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
        self._tasks: set[asyncio.Task[None]] = set()
        registry.on("quarantined", self._quarantined_here)

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
            if newest is not None and legacy(newest):
                newest = None  # NOTE: not followed until a replica that serves it rewrites it with its digest
            if pin is not None and legacy(pin):
                log.error("the pin of %s/%s names no digest: not applied at start", name, pin.version)
                pin = None
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

    async def pin(
        self, name: str, version: str, *, by: Actor | None = None, allow_never_decline: bool = False
    ) -> LoadedModel:
        """Serve `version` of `name` on every replica until released (loaded from the source if need be):
        the control plane's promote. A version whose thresholds differ from the live one's has the change
        stated (logged and audited); one that could never decline is refused unless `allow_never_decline`.

        The record is written first: if the store does not keep it, this raises and nothing
        serves differently here. If this replica then cannot load the version, the record
        that was there before is put back and the error raised. `by`: who asked, and why
        (audited; None: a step of another action, audited as that action).
        """
        check_ref(name, version)
        async with self._lock(name):
            await self._check_pinnable(name, version)
            sha256 = await self.digest(name, version)
            change = await self._check_promotable(name, version, sha256, allow_never_decline)
            if change is not None and by is not None:
                by = Actor(by.who, f"{by.reason}; {change}" if by.reason else change)
            if self._control is None:
                loaded = await self._pin_here(name, version, sha256)
            else:
                [(_, before)] = await self._records([name])
                await record_pin(self._control, name, version, sha256)
                try:
                    loaded = await self._pin_here(name, version, sha256)
                except ScoringError:
                    await self._control.write(pin_key(name), encode(before or PinRecord(None, at=time.time())))
                    raise
        if by is not None:
            await self.audit.record(by, "pin", name, version=version)
        return loaded

    async def unpin(self, name: str, *, by: Actor | None = None) -> LoadedModel:
        """Release a pin everywhere: the newest version serves again (record first, as for `pin`)."""
        self._registry.active(name)  # NOTE: ModelNotFound before any record is written
        async with self._lock(name):
            if self._control is not None:
                await self._control.write(pin_key(name), encode(PinRecord(None, at=time.time())))
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

    def _quarantined_here(self, event: RegistryEvent) -> None:
        """A version tripped a bound here: the fleet's record names it (written in the background)."""
        if self._control is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._share_quarantine(event.name))
        except RuntimeError:  # no loop: the watch writes it back
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _share_quarantine(self, name: str) -> None:
        try:
            await self._sync_quarantine(name)
        except ControlStoreDown as exc:  # the watch writes it back once the store answers
            log.error("the quarantine of %r is not shared yet: %s", name, exc.detail)

    async def _sync_quarantine(self, name: str) -> None:
        """Quarantine here what the fleet's record names; write back the union where the record lacks one of ours."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        (payload,) = await self._control.read([quarantine_key(name)])
        record = decode_record(name, payload, QuarantineRecord)
        fleet = dict(record.versions) if record is not None else {}
        for version, why in sorted(fleet.items()):
            if self._registry.quarantine(name, version, why):
                self._changed(name)
        here = self._registry.quarantined(name)
        if not here.keys() <= fleet.keys():
            await self._control.write(quarantine_key(name), encode(QuarantineRecord({**here, **fleet})))

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
                try:
                    loaded = await self._registry.load(ModelRef(name, version))
                except WarmupStarved as exc:  # NOTE: the CPU's state: the others go on, the next tick tries it again
                    log.warning("model %s/%s not loaded yet: %s", name, version, exc.detail)
                    continue
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
        await self._sync_quarantine(name)
        [(latest, pin)] = await self._records([name])
        latest, pin = await self._digested(name, latest, pin)
        if latest is not None:
            await self._follow_latest(name, latest)
        await self._write_back_latest(name, latest)
        held = self._registry.pinned(name)
        if pin is None:
            if held is not None and await self._control.write_if_absent(pin_key(name), encode(self._held_pin(name))):
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

    async def _digested(
        self, name: str, latest: LatestRecord | None, pin: PinRecord | None
    ) -> tuple[LatestRecord | None, PinRecord | None]:
        """Records written before records named digests (`sha256` empty) have an end: one that names a
        version this replica serves is rewritten with the digest of the file it loaded; the others are
        not followed here (read as absent) until a replica that serves the version rewrites them."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        if latest is not None and legacy(latest):
            digest = self._loaded_digest(name, latest.version)
            latest = None if digest is None else msgspec.structs.replace(latest, sha256=digest)
            if latest is not None:
                await self._control.write(latest_key(name), encode(latest))
                log.warning("the newest-version record of %s/%s named no digest; rewritten", name, latest.version)
        if pin is not None and legacy(pin):
            digest = self._loaded_digest(name, str(pin.version))
            if digest is None:
                raise ModelInvalid(
                    f"the pin of {name}/{pin.version} names no digest (a record from before digests) and this replica "
                    "does not serve that version: not followed until a replica that does rewrites it"
                )
            pin = msgspec.structs.replace(pin, sha256=digest)
            await self._control.write(pin_key(name), encode(pin))
            self._written_back.note(f"the pin of {name!r} (version {pin.version}) named no digest; rewritten")
        return latest, pin

    def _loaded_digest(self, name: str, version: str) -> str | None:
        loaded = version in self._registry.loaded_versions(name)
        return self._registry.active(name, version).digest or None if loaded else None

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

    async def _check_promotable(self, name: str, version: str, sha256: str, allow_never_decline: bool) -> str | None:
        """Load `version` here (with the file `sha256` names) and weigh its thresholds against the live
        version's: the change, stated (None: the same); `RolloutConflict` for a version that could never decline."""
        live = self._registry.active(name)
        self._registry.vouch(ModelRef(name, version), sha256)
        held = self._registry.held(name)
        self._registry.hold(name, held | {version})  # NOTE: kept loaded beyond MODELS_KEEP_VERSIONS, never active
        try:
            await self._ensure_loaded(name, version)
            candidate = self._registry.active(name, version)
        finally:
            self._registry.hold(name, held)
        before = None if version == live.version else (live.version, live.spec.thresholds)
        change = weigh_promote(
            name, version, candidate.spec.thresholds, candidate.max_score, before, allow_never_decline
        )
        if change is not None:
            log.warning("promote of %s/%s: %s", name, version, change)
        return change

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


def _latest(loaded: LoadedModel) -> bytes:
    return encode(LatestRecord(loaded.name, loaded.version, loaded.fingerprint, loaded.digest, time.time()))
