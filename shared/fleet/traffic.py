"""Traffic: a model's shadow version and its canary split, the same on every replica.

    models:shadow:{name}   {"version": "3" | null, "at": epoch s, "sha256"}
    models:canary:{name}   {"version": "3" | null, "weight": 0.1, "at": epoch s,
                            "aborted": {"reason": "decline_share", "at": epoch s} | null,
                            "last_abort": {"version": "2", "reason": "api", "at": epoch s} | null,
                            "sha256"}

A shadow version scores every event of its model after the answer is sent (shared/fleet/shadow.py);
a canary version answers for `weight` of the users, chosen by a stable hash of (name, user_id):
the same user gets the same arm on every replica and in every process, and raising the weight
only moves users from the live arm to the canary (a user's bucket is fixed; the bar rises).

The records live beside the pins (shared/fleet/rollout.py) and are kept the same way: written
first (a write the store refuses raises `ControlStoreDown` and changes nothing here), read by
every replica every WATCH_S, applied at start, and a release is a record too (`version` null),
so a *missing* record means "lost" and a replica that holds a shadow or canary writes it back.
Each names its version's file by SHA-256, as a pin does: a replica whose file is another one
neither loads nor routes to it (`ModelRegistry.vouch`).
A version a record names is held loaded (`ModelRegistry.hold`) beyond MODELS_KEEP_VERSIONS while
named, and released when it no longer is; being held never makes it the version that serves.

The automatic abort (`observe`) judges each replica's own traffic; its verdict is a record, so
every replica stops routing to the candidate within a watch tick.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any, Literal

import msgspec

from shared.domain.answers import AbortView, ArmView, CanaryView, ShadowView
from shared.domain.records import Arm
from shared.errors import BadRequest, ControlStoreDown, ModelInvalid, ModelNotFound, RolloutConflict, ScoringError
from shared.fleet.keys import Aborted, CanaryRecord, LastAbort, ShadowRecord, canary_key, decode_record, shadow_key
from shared.fleet.shadow import ShadowScorer
from shared.fleet.versions import WATCH_S, Rollout, WrittenBack, watch
from shared.models.registry import ModelRegistry, RegistryEvent
from shared.models.repository import ModelRef, check_ref, version_key
from shared.models.served import LoadedModel
from shared.settings import RolloutPolicy
from shared.stores.control import Actor, ControlStore
from shared.telemetry import metrics

__all__ = ["AbortReason", "Traffic", "bucket"]

log = logging.getLogger(__name__)

AbortReason = Literal["api", "decline_share", "error_rate"]
Z = 4.5  # the automatic abort also needs the difference this many standard errors away (Traffic.observe)
_SPAN = 1 << 64  # buckets are 8-byte hashes: a user's bucket is its hash / _SPAN, in [0, 1)
_DECLINE, _ERROR = 1, 2  # a decision's code in an arm's window (0: approve or review)
_CODES = {"decline": _DECLINE, "error": _ERROR}


def _hash(name: str, user_id: str) -> int:
    # "/" never occurs in a model name (shared/models/repository.py NAME): the pair is unambiguous
    return int.from_bytes(blake2b(f"{name}/{user_id}".encode(), digest_size=8).digest(), "big")


def bucket(name: str, user_id: str) -> float:
    """Where `user_id` falls in [0, 1) for `name`'s split: the same on every replica, in every process."""
    return _hash(name, user_id) / _SPAN


# -- a canary split on this replica -------------------------------------------------------------


class _Window:
    """The last `size` decisions of one arm: running counts, O(1) per decision."""

    __slots__ = ("codes", "declines", "errors", "events", "next")

    def __init__(self, size: int) -> None:
        self.codes = bytearray(size)
        self.next = self.events = self.declines = self.errors = 0

    def add(self, code: int) -> None:
        codes, i = self.codes, self.next
        if self.events == len(codes):
            old = codes[i]
            self.declines -= old == _DECLINE
            self.errors -= old == _ERROR
        else:
            self.events += 1
        codes[i] = code
        self.declines += code == _DECLINE
        self.errors += code == _ERROR
        self.next = i + 1 if i + 1 < len(codes) else 0

    def shares(self) -> tuple[float | None, float | None]:
        """(decline share among the decisions taken, error rate among all) — None while empty."""
        decided = self.events - self.errors
        return (
            self.declines / decided if decided else None,
            self.errors / self.events if self.events else None,
        )

    def view(self, version: str) -> ArmView:
        decline, error = self.shares()
        return ArmView(
            version,
            self.events,
            self.declines,
            self.errors,
            None if decline is None else round(decline, 6),
            None if error is None else round(error, 6),
        )


@dataclass(slots=True, eq=False)
class _Split:
    """A running canary as this replica routes it."""

    record: CanaryRecord
    model: LoadedModel
    below: int  # a user whose hash is below this takes the canary: weight * _SPAN
    live: _Window
    canary: _Window


@dataclass(slots=True)
class _Pending:
    """An abort decided here that the store has not kept yet."""

    tripped: CanaryRecord  # the record whose canary it stops
    record: CanaryRecord  # the record that says so
    reason: AbortReason


@dataclass(slots=True)
class _Applied:
    """The records as this replica applies them, per model."""

    shadow: dict[str, ShadowRecord] = field(default_factory=dict)
    canary: dict[str, CanaryRecord] = field(default_factory=dict)


class Traffic:
    """Shadows and canary splits on this replica, following the fleet's records.

    The core, per event of model `name`:

        canary = traffic.canary_for(name, user_id)      # None: the live version answers
        ... score with `canary or live`, decide ...
        traffic.observe(name, "canary" if canary else "live", decision)   # "error" when it failed
        shadow = traffic.shadow_of(name)                # None: no shadow
        ... scorer.offer(record, shadow) if shadow else emit(record)

    `observe` does nothing (one dict lookup) while `name` has no split; `split(name)` says
    whether it has one (a record's `arm` is set only then).
    """

    def __init__(
        self,
        registry: ModelRegistry,
        rollout: Rollout,
        control: ControlStore | None,
        policy: RolloutPolicy,
        *,
        watch_s: float = WATCH_S,
        scorer: ShadowScorer | None = None,
    ) -> None:
        self._registry = registry
        self._rollout = rollout
        self._control = control
        self._policy = policy
        self._watch_s = watch_s
        self._scorer = scorer
        self._shadows: dict[str, LoadedModel] = {}  # HOT: name -> its shadow version, where one is loaded
        self._splits: dict[str, _Split] = {}  # HOT: name -> its running canary, where one is loaded
        self._applied = _Applied()
        self._pending: dict[str, _Pending] = {}
        self._failed: dict[tuple[str, str], str] = {}  # (name, version) -> why it is not loaded here (logged once)
        self._written_back = WrittenBack()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        registry.on("activated", self._follow)
        registry.on("retired", self._follow)

    # -- the hot path ------------------------------------------------------------------------

    def canary_for(self, name: str, user_id: str) -> LoadedModel | None:
        """The canary version when `user_id` falls in `name`'s split, else None (the live one answers)."""
        split = self._splits.get(name)
        if split is None:
            return None
        return split.model if _hash(name, user_id) < split.below else None

    def shadow_of(self, name: str) -> LoadedModel | None:
        """The version that shadows `name`, or None."""
        return self._shadows.get(name)

    def split(self, name: str) -> bool:
        """Whether `name` has a running canary split here (weight 0 included)."""
        return name in self._splits

    def observe(self, name: str, arm: Arm, decision: str) -> None:
        """Count one decision (approve, review, decline or error) of an arm of `name`'s split.

        The automatic abort: once BOTH arms hold CANARY_MIN_EVENTS of their last CANARY_WINDOW
        decisions, the candidate is aborted when its error rate exceeds the live one's by more
        than CANARY_MAX_ERROR_DELTA, or its decline share (declines among the decisions taken,
        errors left out) differs from the live one's by more than CANARY_MAX_DECLINE_DELTA,
        either way, AND that difference is at least Z = 4.5 standard errors (a pooled
        two-proportion z statistic). Decided on this replica's own traffic, at once: weight 0
        here, the abort record written in the background so every replica stops routing to it.

        Why both: the bound says how large a change matters ("5 points more declines"); the z
        test says it is not noise. The bound alone tripped on noise: simulated with both arms
        declining 10% and 10% of users on the candidate, 18% of healthy canaries tripped within
        5,000 candidate decisions (it is tested after every decision: many looks). With z >= 3,
        9.5%; with z >= 4.5, none of 200 runs (nor at a 30% decline share), while a candidate
        declining 7 points more still tripped in every run (median: its ~460th decision), one
        10 points more at its ~240th, one 7 points fewer at its ~350th (`python -m bench.canary_guard`
        runs this simulation through this very rule).
        It does not catch a shift smaller than a bound, a change of review share or of scores
        that keeps the decline share, harm confined to a small group of users, or a drift both
        arms share.
        """
        split = self._splits.get(name)
        if split is None:
            return
        metrics.canary(name, arm, decision)
        (split.canary if arm == "canary" else split.live).add(_CODES.get(decision, 0))
        live, candidate = split.live, split.canary
        if live.events < self._policy.canary_min_events or candidate.events < self._policy.canary_min_events:
            return
        reason = self._verdict(live, candidate)
        if reason is not None:
            self._trip(name, split, reason)

    def _verdict(self, live: _Window, candidate: _Window) -> AbortReason | None:
        policy = self._policy
        live_decline, live_error = live.shares()
        decline, error = candidate.shares()
        if (
            error is not None
            and live_error is not None
            and error - live_error > policy.canary_max_error_delta
            and _z(error, candidate.events, live_error, live.events) >= Z
        ):
            return "error_rate"
        if decline is None or live_decline is None:
            return None  # an arm that only erred: its error rate speaks for it
        decided, live_decided = candidate.events - candidate.errors, live.events - live.errors
        if abs(decline - live_decline) > policy.canary_max_decline_delta:
            return "decline_share" if abs(_z(decline, decided, live_decline, live_decided)) >= Z else None
        return None

    def _trip(self, name: str, split: _Split, reason: AbortReason) -> None:
        """Stop routing to the candidate here at once; keep the abort in the store in the background."""
        now = time.time()
        tripped = split.record
        record = _aborted(tripped, reason, now)
        del self._splits[name]
        self._applied.canary[name] = record  # NOTE: first: a hook or a tick must not route to it again
        metrics.canary_abort(name, reason)
        metrics.canary_weight(name, 0.0)
        log.warning(
            "canary %s/%s aborted (%s): live %s, candidate %s",
            name,
            tripped.version,
            reason,
            split.live.view(self._live_version(name) or ""),
            split.canary.view(str(tripped.version)),
        )
        if self._control is not None:
            self._pending[name] = _Pending(tripped, record, reason)
        self._spawn(self._settle(name))

    # -- what the API calls -------------------------------------------------------------------

    async def set_shadow(self, name: str, version: str | None, *, by: Actor | None = None) -> None:
        """Shadow `name` with `version` on every replica (None: no shadow). Record first, then the audit."""
        self._registry.active(name)  # NOTE: ModelNotFound before any record is written
        if version is not None:
            check_ref(name, version)
        async with self._lock(name):
            sha256 = ""
            if version is not None:
                await self._check_candidate(name, version, "shadow")
                sha256 = await self._rollout.digest(name, version)
            before = self._applied.shadow.get(name)
            record = ShadowRecord(version, time.time(), sha256)
            await self._write(shadow_key(name), record)
            self._applied.shadow[name] = record
            try:
                await self._loaded(name, version)
            except ScoringError:
                await self._put_back(shadow_key(name), before or ShadowRecord(None, time.time()))
                self._applied.shadow[name] = before or ShadowRecord(None, time.time())
                await self._hold(name)
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
        self._registry.active(name)
        check_ref(name, version)
        async with self._lock(name):
            await self._check_candidate(name, version, "canary")
            before = await self._current_canary(name)
            last = before.last_abort if before is not None else None
            sha256 = await self._rollout.digest(name, version)
            record = CanaryRecord(version, float(weight), time.time(), None, last, sha256)
            await self._write(canary_key(name), record)
            self._pending.pop(name, None)  # the operator's record replaces an abort not yet kept
            self._applied.canary[name] = record
            try:
                await self._loaded(name, version)
            except ScoringError:
                kept = before or CanaryRecord(None, 0.0, time.time(), None, last)
                await self._put_back(canary_key(name), kept)
                self._applied.canary[name] = kept
                await self._hold(name)
                raise
        await self._rollout.audit.record(by, "canary", name, version=version, weight=float(weight))

    async def abort(self, name: str, reason: AbortReason = "api", *, by: Actor | None = None) -> None:
        """Stop `name`'s canary on every replica: weight 0, the record keeps the abort and why (`by`: audited)."""
        self._registry.active(name)
        async with self._lock(name):
            current = await self._current_canary(name)
            if current is None or current.version is None:
                raise RolloutConflict(f"model {name!r} has no canary to abort")
            if current.aborted is not None:
                return  # aborted already: the first abort's reason stands
            record = _aborted(current, reason, time.time())
            await self._write(canary_key(name), record)
            self._pending.pop(name, None)
            self._applied.canary[name] = record
            metrics.canary_abort(name, reason)
            await self._hold(name)
        await self._rollout.audit.record(by, "abort", name, version=current.version)

    async def promote(self, name: str, *, by: Actor | None = None) -> None:
        """The candidate becomes the pinned version on every replica (`Rollout.pin`), then the split is cleared.

        `RolloutConflict` when there is no running canary (an aborted one is pinned, if at all,
        through POST /api/models/{name}/activate). If the store keeps the pin but not the
        cleared split, this raises with the candidate serving everyone; promoting again clears it.
        """
        self._registry.active(name)
        async with self._lock(name):
            current = await self._current_canary(name)
            if current is None or current.version is None:
                raise RolloutConflict(f"model {name!r} has no canary to promote")
            if current.aborted is not None:
                raise RolloutConflict(
                    f"the canary {name}/{current.version} was aborted ({current.aborted.reason}): set it again "
                    f"(or pin it: POST /api/models/{name}/activate)"
                )
            await self._rollout.pin(name, current.version)
            record = CanaryRecord(None, 0.0, time.time(), None, current.last_abort)
            await self._write(canary_key(name), record)
            self._pending.pop(name, None)
            self._applied.canary[name] = record
            shadow = self._applied.shadow.get(name)
            if shadow is not None and shadow.version == current.version:  # it serves now: a shadow of
                released = ShadowRecord(None, time.time())  # itself would score every event twice alike
                await self._write(shadow_key(name), released)
                self._applied.shadow[name] = released
            await self._hold(name)
        await self._rollout.audit.record(by, "promote", name, version=current.version)

    def describe(self, name: str) -> tuple[ShadowView | None, CanaryView | None, AbortView | None]:
        """`name`'s shadow (with this replica's comparison), its canary split, its last abort."""
        shadow_record = self._applied.shadow.get(name)
        shadow = None
        if shadow_record is not None and shadow_record.version is not None:
            version = shadow_record.version
            shadow = self._scorer.view(name, version) if self._scorer else ShadowView(version, 0, 0, None, None, 0, 0)
        canary_record = self._applied.canary.get(name)
        canary = None
        if canary_record is not None and canary_record.running:
            split = self._splits.get(name)
            live, candidate = (split.live, split.canary) if split else (_Window(1), _Window(1))
            live_version = self._live_version(name) or ""
            canary = CanaryView(
                str(canary_record.version),
                canary_record.weight,
                canary_record.at,
                live.view(live_version),
                candidate.view(str(canary_record.version)),
            )
        last = canary_record.last_abort if canary_record is not None else None
        abort = None if last is None else AbortView(last.version, last.reason, last.at)
        return shadow, canary, abort

    def problem(self) -> str | None:
        """What readiness lists: the store failing, an abort not kept yet, a lost record written back lately."""
        if self._pending:  # NOTE: first: more telling than the store's failure that causes it
            name, pending = min(self._pending.items())
            return (
                f"control: the abort of the canary {name}/{pending.tripped.version} ({pending.reason}) is not "
                "kept in Redis yet: this replica routes no user to it, the others may"
            )
        return self._written_back.problem(self._control)

    # -- start and the background job -----------------------------------------------------------

    async def restore(self) -> None:
        """At start, after the registry loaded: the fleet's shadows and splits apply here too.

        With the store down, this replica starts with none, says so in readiness, and applies
        them as soon as its watch reads them.
        """
        if self._control is None:
            return
        for name in self._registry.names():
            try:
                await self._reconcile(name)
            except ControlStoreDown as exc:
                log.error("the fleet's shadows and canaries are unknown at start, serving without: %s", exc.detail)
                return
            except ScoringError as exc:
                log.warning("traffic records of %s not applied: %s", name, exc.detail)

    async def run(self) -> None:
        """Follow the fleet's records every WATCH_S, until cancelled (nothing to follow without a store)."""
        if self._control is None:
            return
        try:
            await watch(self._registry, self._reconcile, self._watch_s, "traffic records")
        finally:
            for task in list(self._tasks):
                task.cancel()

    async def _reconcile(self, name: str) -> None:
        async with self._lock(name):
            await self._reconcile_records(name)

    async def _reconcile_records(self, name: str) -> None:
        """Keep a pending abort, write back lost records, then apply what the store holds."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        shadow_payload, canary_payload = await self._control.read([shadow_key(name), canary_key(name)])
        shadow: ShadowRecord | None = decode_record(name, shadow_payload, ShadowRecord)
        canary: CanaryRecord | None = decode_record(name, canary_payload, CanaryRecord)
        canary = await self._keep_pending(name, canary)
        held_shadow, held_canary = self._applied.shadow.get(name), self._applied.canary.get(name)
        if shadow is None and held_shadow is not None and held_shadow.version is not None:
            if await self._control.write_if_absent(shadow_key(name), msgspec.json.encode(held_shadow)):
                self._written_back.note(
                    f"the shadow of {name!r} (version {held_shadow.version}) was missing; written back"
                )
        elif shadow is not None:
            self._applied.shadow[name] = shadow
        if canary is None and held_canary is not None and held_canary.version is not None:
            if await self._control.write_if_absent(canary_key(name), msgspec.json.encode(held_canary)):
                self._written_back.note(
                    f"the canary of {name!r} (version {held_canary.version}) was missing; written back"
                )
        elif canary is not None:
            self._applied.canary[name] = canary
        await self._hold(name)

    async def _keep_pending(self, name: str, canary: CanaryRecord | None) -> CanaryRecord | None:
        """Write an abort decided here, unless the record changed since (a new canary, another abort)."""
        assert self._control is not None  # noqa: S101 narrows the type for mypy; the caller checked
        pending = self._pending.get(name)
        if pending is None:
            return canary
        # NOTE: read, compare, write: not atomic, but a record that changed in the few ms between
        # wins on the next tick anyway; an abort never overwrites a canary set after the one it stops
        if canary is None:
            await self._control.write_if_absent(canary_key(name), msgspec.json.encode(pending.record))
        elif canary == pending.tripped:
            await self._control.write(canary_key(name), msgspec.json.encode(pending.record))
            canary = pending.record
        del self._pending[name]
        return canary

    async def _settle(self, name: str) -> None:
        """After an automatic abort: keep its record, release the candidate."""
        try:
            async with self._lock(name):
                if self._control is not None:
                    await self._reconcile_records(name)
                else:
                    await self._hold(name)
        except ScoringError as exc:  # the watch retries; readiness names an abort not kept
            log.warning("the abort of %s's canary is not kept yet: %s", name, exc.detail)

    # -- holding versions and routing to them -----------------------------------------------------

    async def _hold(self, name: str) -> None:
        """Hold and load the versions the applied records name, release the others, route."""
        wanted = self._wanted(name)
        released = self._registry.held(name) - wanted.keys()
        self._registry.hold(name, set(wanted))
        for version, sha256 in sorted(wanted.items(), key=lambda item: version_key(item[0])):
            try:
                self._registry.vouch(ModelRef(name, version), sha256)  # only the file the record names
                await self._ensure_loaded(name, version)
            except ScoringError as exc:
                if self._failed.get((name, version)) != exc.detail:
                    log.warning(
                        "%s/%s, which a shadow or canary names, is not loaded here: %s", name, version, exc.detail
                    )
                    self._failed[name, version] = exc.detail
        if released:
            await self._registry.release_unheld(name)
        self._resolve(name)

    async def _loaded(self, name: str, version: str | None) -> None:
        """Apply what was just recorded here; the error when `version` cannot be loaded."""
        await self._hold(name)
        if version is not None and (
            version not in self._registry.loaded_versions(name) or (name, version) in self._failed
        ):
            detail = self._failed.get((name, version), f"{name}/{version} cannot be loaded")
            raise ModelInvalid(detail)

    def _wanted(self, name: str) -> dict[str, str]:
        """The versions the applied records name, each with the digest its record names."""
        shadow, canary = self._applied.shadow.get(name), self._applied.canary.get(name)
        wanted = {shadow.version: shadow.sha256} if shadow is not None and shadow.version is not None else {}
        if canary is not None and canary.running:
            wanted[str(canary.version)] = canary.sha256
        return wanted

    def _resolve(self, name: str) -> None:
        """Point the hot dicts at the loaded versions the records name (never at the live one)."""
        live = self._live_version(name)
        shadow = self._applied.shadow.get(name)
        model = self._version(name, shadow.version) if shadow is not None and shadow.version != live else None
        if model is None:
            self._shadows.pop(name, None)
        else:
            self._shadows[name] = model
        canary = self._applied.canary.get(name)
        if canary is None:
            return
        model = self._version(name, canary.version) if canary.running and canary.version != live else None
        split = self._splits.get(name)
        if model is None:
            self._splits.pop(name, None)
        elif split is not None and split.record.version == canary.version:
            split.record, split.model, split.below = canary, model, _below(canary.weight)  # windows kept
        else:
            size = self._policy.canary_window
            self._splits[name] = _Split(canary, model, _below(canary.weight), _Window(size), _Window(size))
        metrics.canary_weight(name, canary.weight if model is not None else 0.0)

    def _follow(self, event: RegistryEvent) -> None:
        """A registry hook: a version was replaced, retired or activated; point at what serves now."""
        if event.name in self._applied.shadow or event.name in self._applied.canary:
            self._resolve(event.name)

    async def _ensure_loaded(self, name: str, version: str) -> None:
        if version in self._registry.loaded_versions(name):
            self._failed.pop((name, version), None)
            return
        await self._check_candidate(name, version, "shadow or canary")
        if await self._registry.load(ModelRef(name, version)) is None:
            error = self._registry.last_error(name)
            raise ModelInvalid(error.reason if error else f"{name}/{version} cannot be loaded")
        self._failed.pop((name, version), None)

    async def _check_candidate(self, name: str, version: str, what: str) -> None:
        """`ModelNotFound` when `version` is nowhere; `RolloutConflict` when it serves, or would once loaded."""
        live = self._registry.active(name).version
        loaded = version in self._registry.loaded_versions(name)
        if not loaded and ModelRef(name, version) not in await asyncio.to_thread(self._registry.repository.list):
            raise ModelNotFound(f"model {name!r} has no version {version!r} in the model source")
        if version == live or (self._registry.pinned(name) is None and version_key(version) > version_key(live)):
            became = "is" if version == live else "would become, once loaded,"
            raise RolloutConflict(
                f"{name}/{version} {became} the version that serves: a {what} needs another live version. "
                f"Pin the one to keep serving first (POST /api/models/{name}/activate), so that an upload "
                "does not replace it"
            )

    # -- helpers ------------------------------------------------------------------------------

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _live_version(self, name: str) -> str | None:
        try:
            return self._registry.active(name).version
        except ScoringError:
            return None

    def _version(self, name: str, version: str | None) -> LoadedModel | None:
        if version is None or version not in self._registry.loaded_versions(name) or (name, version) in self._failed:
            return None  # failed: loaded, but not with the file its record names
        return self._registry.active(name, version)

    async def _current_canary(self, name: str) -> CanaryRecord | None:
        """The canary record as the store holds it now (this replica's where there is no store)."""
        if self._control is None:
            return self._applied.canary.get(name)
        (payload,) = await self._control.read([canary_key(name)])
        current: CanaryRecord | None = decode_record(name, payload, CanaryRecord)
        return current if current is not None else self._applied.canary.get(name)

    async def _write(self, key: str, record: ShadowRecord | CanaryRecord) -> None:
        if self._control is not None:
            await self._control.write(key, msgspec.json.encode(record))

    async def _put_back(self, key: str, record: ShadowRecord | CanaryRecord) -> None:
        try:
            await self._write(key, record)
        except ControlStoreDown as exc:  # the load error is the one to report; the watch reapplies
            log.error("the record %s could not be put back: %s", key, exc.detail)

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(job)
        except RuntimeError:  # no loop (a synchronous caller): the watch keeps the abort
            job.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _z(share: float, events: int, live_share: float, live_events: int) -> float:
    """The two-proportion z statistic of a candidate's share against the live one's (pooled)."""
    pooled = (share * events + live_share * live_events) / (events + live_events)
    variance = pooled * (1.0 - pooled) * (1.0 / events + 1.0 / live_events)
    return (share - live_share) / math.sqrt(variance) if variance > 0 else 0.0


def _below(weight: float) -> int:
    return min(_SPAN, int(weight * _SPAN))


def _aborted(record: CanaryRecord, reason: AbortReason, at: float) -> CanaryRecord:
    version = str(record.version)
    return CanaryRecord(version, 0.0, at, Aborted(reason, at), LastAbort(version, reason, at), record.sha256)
