"""Routes: where each event of a model goes on this replica, by the fleet's shadow and canary records.

    canary = routes.canary_for(name, user_id)      # None: the live version answers
    routes.observe(name, "canary" | "live", decision)   # counts; the judge may trip the canary
    shadow = routes.shadow_of(name)                 # None: no shadow

A canary version answers for `weight` of the users, chosen by a stable hash of (name, user_id):
the same user gets the same arm on every replica and in every process, and raising the weight
only moves users from the live arm to the canary (a user's bucket is fixed; the bar rises).

`Routes` owns the records as this replica applies them (`apply_shadow`, `apply_canary`: the
operator's commands, shared/fleet/commands.py, and the sync with the store, shared/fleet/sync.py,
change them only through it), the versions they hold loaded (`hold`) and the hot dicts the
request path reads. An automatic abort is decided here on the request path, at once and
without I/O: weight 0 here, and the abort waits (`pending`, `tripped`) for the sync's
background loop to keep it in the store and release the candidate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from hashlib import blake2b

from shared.domain.answers import AbortView, CanaryView, ShadowView
from shared.domain.records import Arm
from shared.errors import ModelInvalid, ModelNotFound, RolloutConflict, ScoringError
from shared.fleet.canary import AbortReason, Window, aborted, code, verdict
from shared.fleet.keys import CanaryRecord, ShadowRecord
from shared.fleet.shadow import ShadowScorer
from shared.models.registry import ModelRegistry, RegistryEvent
from shared.models.repository import ModelRef, version_key
from shared.models.served import LoadedModel
from shared.policies import RolloutPolicy
from shared.telemetry import metrics

__all__ = ["Pending", "Routes", "bucket"]

log = logging.getLogger(__name__)

_SPAN = 1 << 64  # buckets are 8-byte hashes: a user's bucket is its hash / _SPAN, in [0, 1)


def _hash(name: str, user_id: str) -> int:
    # "/" never occurs in a model name (shared/models/repository.py NAME): the pair is unambiguous
    return int.from_bytes(blake2b(f"{name}/{user_id}".encode(), digest_size=8).digest(), "big")


def bucket(name: str, user_id: str) -> float:
    """Where `user_id` falls in [0, 1) for `name`'s split: the same on every replica, in every process."""
    return _hash(name, user_id) / _SPAN


def _below(weight: float) -> int:
    return min(_SPAN, int(weight * _SPAN))


@dataclass(slots=True, eq=False)
class _Split:
    """A running canary as this replica routes it."""

    record: CanaryRecord
    model: LoadedModel
    below: int  # a user whose hash is below this takes the canary: weight * _SPAN
    live: Window
    canary: Window


@dataclass(slots=True)
class Pending:
    """An abort decided here that the store has not kept yet."""

    tripped: CanaryRecord  # the record whose canary it stops
    record: CanaryRecord  # the record that says so
    reason: AbortReason


@dataclass(slots=True)
class _Applied:
    """The records as this replica applies them, per model."""

    shadow: dict[str, ShadowRecord] = field(default_factory=dict)
    canary: dict[str, CanaryRecord] = field(default_factory=dict)


class Routes:
    """Shadows and canary splits on this replica, as the applied records say.

    `observe` does nothing (one dict lookup) while `name` has no split; `split(name)` says
    whether it has one (a record's `arm` is set only then).
    """

    def __init__(
        self, registry: ModelRegistry, policy: RolloutPolicy, *, stored: bool, scorer: ShadowScorer | None = None
    ) -> None:
        self._registry = registry
        self._policy = policy
        self._stored = stored  # whether a control store keeps the records (else an abort has nothing to wait for)
        self._scorer = scorer
        self._shadows: dict[str, LoadedModel] = {}  # HOT: name -> its shadow version, where one is loaded
        self._splits: dict[str, _Split] = {}  # HOT: name -> its running canary, where one is loaded
        self._applied = _Applied()
        self._pending: dict[str, Pending] = {}
        self._tripped: set[str] = set()  # models whose canary tripped here, until the sync settles them
        self._failed: dict[tuple[str, str], str] = {}  # (name, version) -> why it is not loaded here (logged once)
        self._locks: dict[str, asyncio.Lock] = {}
        self.wake: asyncio.Event | None = None  # set by a trip; the sync's loop creates and waits on it
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
        """Count one decision (approve, review, decline or error) of an arm of `name`'s split, and
        judge the candidate (shared/fleet/canary.py `verdict`) on this replica's own traffic: when it
        trips, weight 0 here at once; the sync's background loop keeps the abort in the store, so
        every replica stops routing to it. Nothing here waits or writes."""
        split = self._splits.get(name)
        if split is None:
            return
        metrics.canary(name, arm, decision)
        (split.canary if arm == "canary" else split.live).add(code(decision))
        reason = verdict(self._policy, split.live, split.canary)
        if reason is not None:
            self._trip(name, split, reason)

    def _trip(self, name: str, split: _Split, reason: AbortReason) -> None:
        """Stop routing to the candidate here at once; hand the abort to the background loop."""
        now = time.time()
        tripped = split.record
        record = aborted(tripped, reason, now)
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
        if self._stored:
            self._pending[name] = Pending(tripped, record, reason)
        self._tripped.add(name)
        if self.wake is not None:
            self.wake.set()

    # -- what the operator's commands and the sync read and change --------------------------------

    def lock(self, name: str) -> asyncio.Lock:
        """One change of `name`'s records at a time (the commands and the sync)."""
        return self._locks.setdefault(name, asyncio.Lock())

    def shadow_record(self, name: str) -> ShadowRecord | None:
        return self._applied.shadow.get(name)

    def canary_record(self, name: str) -> CanaryRecord | None:
        return self._applied.canary.get(name)

    def apply_shadow(self, name: str, record: ShadowRecord) -> None:
        """Apply a shadow record here (routed once `hold` runs)."""
        self._applied.shadow[name] = record

    def apply_canary(self, name: str, record: CanaryRecord) -> None:
        """Apply a canary record here (routed once `hold` runs)."""
        self._applied.canary[name] = record

    def pending(self, name: str) -> Pending | None:
        """An abort decided here that the store has not kept yet."""
        return self._pending.get(name)

    def drop_pending(self, name: str) -> None:
        """The store keeps the abort now, or a command's record replaced it."""
        self._pending.pop(name, None)

    def take_tripped(self) -> list[str]:
        """The models whose canary tripped here since the last call (for the sync to settle)."""
        tripped, self._tripped = sorted(self._tripped), set()
        return tripped

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
            live, candidate = (split.live, split.canary) if split else (Window(1), Window(1))
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
        """An abort decided here that the store has not kept yet (readiness lists it)."""
        if not self._pending:
            return None
        name, pending = min(self._pending.items())
        return (
            f"control: the abort of the canary {name}/{pending.tripped.version} ({pending.reason}) is not "
            "kept in Redis yet: this replica routes no user to it, the others may"
        )

    # -- holding versions and routing to them -----------------------------------------------------

    async def hold(self, name: str) -> None:
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

    async def loaded(self, name: str, version: str | None) -> None:
        """Apply what was just recorded here; the error when `version` cannot be loaded."""
        await self.hold(name)
        if version is not None and (
            version not in self._registry.loaded_versions(name) or (name, version) in self._failed
        ):
            detail = self._failed.get((name, version), f"{name}/{version} cannot be loaded")
            raise ModelInvalid(detail)

    async def check_candidate(self, name: str, version: str, what: str) -> None:
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
            self._splits[name] = _Split(canary, model, _below(canary.weight), Window(size), Window(size))
        metrics.canary_weight(name, canary.weight if model is not None else 0.0)

    def _follow(self, event: RegistryEvent) -> None:
        """A registry hook: a version was replaced, retired or activated; point at what serves now."""
        if event.name in self._applied.shadow or event.name in self._applied.canary:
            self._resolve(event.name)

    async def _ensure_loaded(self, name: str, version: str) -> None:
        if version in self._registry.loaded_versions(name):
            self._failed.pop((name, version), None)
            return
        await self.check_candidate(name, version, "shadow or canary")
        if await self._registry.load(ModelRef(name, version)) is None:
            error = self._registry.last_error(name)
            raise ModelInvalid(error.reason if error else f"{name}/{version} cannot be loaded")
        self._failed.pop((name, version), None)

    def _live_version(self, name: str) -> str | None:
        try:
            return self._registry.active(name).version
        except ScoringError:
            return None

    def _version(self, name: str, version: str | None) -> LoadedModel | None:
        if version is None or version not in self._registry.loaded_versions(name) or (name, version) in self._failed:
            return None  # failed: loaded, but not with the file its record names
        return self._registry.active(name, version)
