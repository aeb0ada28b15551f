"""The admin plane: what the fleet serves, and who changed it.

    install_model                       a new version from the Blob trigger (then told to the fleet)
    pin / unpin                         one version everywhere until released (the explicit promote)
    rollout                             what serves a model, its shadow, canary split and drift
    set_shadow / set_canary / abort_canary / promote_canary
                                        a model's shadow version and canary split, fleet-wide
    control_actions                     the last control actions: who, what, when, why
    review                              an event's review (the reviewer's working: admin only)
    on_model                            follow the models' lifecycle (telemetry)

Every change is recorded in the control store first (shared/fleet), so each replica applies it
within a watch tick; this class only routes the calls the control routes make
(shared/adapters/http/routes.py, `_control`: the master key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.domain.answers import ControlAction, ModelView, ReviewRecord, RolloutView
from shared.errors import ReviewNotFound, RolloutConflict
from shared.fleet.versions import Rollout
from shared.models.registry import EventKind, Hook, ModelRegistry
from shared.models.repository import ModelRef
from shared.models.served import LoadedModel
from shared.stores.control import Actor

if TYPE_CHECKING:
    from shared.fleet.drift import DriftMonitor
    from shared.fleet.traffic import Traffic
    from shared.review.reviewer import Reviewer

__all__ = ["AdminPlane"]


class AdminPlane:
    """Install, pin, shadow, canary and promote model versions, fleet-wide."""

    def __init__(
        self,
        registry: ModelRegistry,
        rollout: Rollout | None,
        traffic: Traffic | None,
        drift: DriftMonitor | None,
        reviewer: Reviewer | None,
    ) -> None:
        self._registry = registry
        self._rollout = rollout
        self._traffic = traffic
        self._drift = drift
        self._reviewer = reviewer

    async def install_model(self, ref: ModelRef, data: bytes) -> LoadedModel:
        """Load, validate, warm and activate a model version (the Blob trigger's path); tell the fleet."""
        loaded = await self._registry.install(ref.name, ref.version, data)
        if self._rollout is not None:
            await self._rollout.installed(loaded)
        return loaded

    async def pin(
        self, name: str, version: str, *, by: Actor | None = None, allow_never_decline: bool = False
    ) -> ModelView:
        """Serve `version` of `name` on every replica until `unpin`: the promote (and the rollback).

        A version that could never decline is refused unless `allow_never_decline`; a change of
        thresholds is stated in the audit (shared/fleet/versions.py)."""
        if self._rollout is not None:
            await self._rollout.pin(name, version, by=by, allow_never_decline=allow_never_decline)  # audited
        else:
            await self._registry.pin(name, version)
        return self._describe(name)

    async def unpin(self, name: str, *, by: Actor | None = None) -> ModelView:
        """Release the pin: the newest promoted version serves again, everywhere."""
        if self._rollout is not None:
            await self._rollout.unpin(name, by=by)
        else:
            await self._registry.unpin(name)
        return self._describe(name)

    def rollout(self, name: str) -> RolloutView:
        """What serves `name`, what shadows it, its canary split and its drift on this replica."""
        live = self._registry.active(name)  # NOTE: ModelNotFound first: an ensemble has no rollout
        shadow = canary = aborted = None
        if self._traffic is not None:
            shadow, canary, aborted = self._traffic.describe(name)
        drift = self._drift.describe(name) if self._drift is not None else []
        return RolloutView(name, live.version, self._registry.pinned(name), shadow, canary, aborted, drift)

    async def set_shadow(self, name: str, version: str | None, *, by: Actor | None = None) -> RolloutView:
        """Score every event of `name` with `version` too, after its answer (None: no shadow), fleet-wide."""
        await self._traffic_or_refuse().set_shadow(name, version, by=by)
        return self.rollout(name)

    async def set_canary(self, name: str, version: str, weight: float, *, by: Actor | None = None) -> RolloutView:
        """Route `weight` of users (by a hash of user_id) to `version` of `name`, fleet-wide."""
        await self._traffic_or_refuse().set_canary(name, version, weight, by=by)
        return self.rollout(name)

    async def abort_canary(self, name: str, *, by: Actor | None = None) -> RolloutView:
        """Every user back to the live version (weight 0), fleet-wide; the abort is kept."""
        await self._traffic_or_refuse().abort(name, "api", by=by)
        return self.rollout(name)

    async def promote_canary(self, name: str, *, by: Actor | None = None) -> RolloutView:
        """The candidate becomes the pinned version everywhere; the split ends."""
        await self._traffic_or_refuse().promote(name, by=by)
        return self.rollout(name)

    async def control_actions(self, name: str) -> list[ControlAction]:
        """The last control actions on `name`, newest first: who, what, when and why."""
        return await self._rollout.audit.recent(name) if self._rollout is not None else []

    async def review(self, event_id: str) -> ReviewRecord:
        """The kept review of an event (done, pending or failed), or `ReviewNotFound`."""
        if self._reviewer is None:
            raise ReviewNotFound("reviews are off: AZURE_OPENAI_ENDPOINT is not set")
        record = await self._reviewer.record(event_id)
        if record is None:
            raise ReviewNotFound(f"no review of event {event_id!r} is kept (never asked for, or expired)")
        return record

    def on_model(self, kind: EventKind, hook: Hook) -> None:
        """Follow the models' lifecycle: `loaded`, `activated`, `retired`, `failed`."""
        self._registry.on(kind, hook)

    def _describe(self, name: str) -> ModelView:
        return next(m for m in self._registry.describe() if m.name == name)

    def _traffic_or_refuse(self) -> Traffic:
        if self._traffic is None:
            raise RolloutConflict("shadow scoring and canaries are not wired in this process")
        return self._traffic
