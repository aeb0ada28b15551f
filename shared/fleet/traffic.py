"""Traffic: a model's shadow version and its canary split, the same on every replica.

A shadow version scores every event of its model after the answer is sent (shared/fleet/shadow.py);
a canary version answers for `weight` of the users, chosen by a stable hash of (name, user_id).
The records that say so are drawn in shared/fleet/keys.py. Three jobs, three modules:

    routes.py     the request path: which version answers a user, which one shadows; the
                  automatic abort's counting and verdict (the judge: canary.py), no I/O
    commands.py   the operator's: shadow, canary, abort, promote (record first, then audit)
    sync.py       the background: the fleet's records applied here every WATCH_S; an abort
                  decided here kept in the store

`Traffic` is the one object the core holds: it builds the three over one `Routes`, hands the
request path straight to it, and each command and the loop to their own module.
"""

from __future__ import annotations

from shared.domain.answers import AbortView, CanaryView, ShadowView
from shared.fleet.canary import AbortReason
from shared.fleet.commands import Commands
from shared.fleet.routes import Routes
from shared.fleet.shadow import ShadowScorer
from shared.fleet.sync import Sync
from shared.fleet.versions import WATCH_S, Rollout
from shared.models.registry import ModelRegistry
from shared.policies import RolloutPolicy
from shared.stores.control import Actor, ControlStore

__all__ = ["Traffic"]


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
        self.routes = routes = Routes(registry, policy, stored=control is not None, scorer=scorer)
        self._commands = Commands(routes, registry, rollout, control)
        self._sync = Sync(routes, registry, control, watch_s=watch_s)
        # the request path: the routes' own methods, with no call in between (HOT)
        self.canary_for = routes.canary_for
        self.shadow_of = routes.shadow_of
        self.split = routes.split
        self.observe = routes.observe

    def describe(self, name: str) -> tuple[ShadowView | None, CanaryView | None, AbortView | None]:
        """`name`'s shadow (with this replica's comparison), its canary split, its last abort."""
        return self.routes.describe(name)

    def problem(self) -> str | None:
        """What readiness lists: an abort not kept yet, the store failing, a lost record written back lately."""
        # NOTE: an abort not kept first: more telling than the store's failure that causes it
        return self.routes.problem() or self._sync.problem()

    async def set_shadow(self, name: str, version: str | None, *, by: Actor | None = None) -> None:
        """Shadow `name` with `version` on every replica (None: no shadow): `Commands.set_shadow`."""
        await self._commands.set_shadow(name, version, by=by)

    async def set_canary(self, name: str, version: str, weight: float, *, by: Actor | None = None) -> None:
        """Route `weight` (0..1) of `name`'s users to `version` on every replica: `Commands.set_canary`."""
        await self._commands.set_canary(name, version, weight, by=by)

    async def abort(self, name: str, reason: AbortReason = "api", *, by: Actor | None = None) -> None:
        """Stop `name`'s canary on every replica, keeping why: `Commands.abort`."""
        await self._commands.abort(name, reason, by=by)

    async def promote(self, name: str, *, by: Actor | None = None) -> None:
        """The candidate becomes the pinned version everywhere; the split ends: `Commands.promote`."""
        await self._commands.promote(name, by=by)

    async def restore(self) -> None:
        """At start, after the registry loaded: the fleet's shadows and splits apply here (`Sync.restore`)."""
        await self._sync.restore()

    async def run(self) -> None:
        """The background job, until cancelled (`Sync.run`)."""
        await self._sync.run()
