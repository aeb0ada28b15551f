"""The lifecycle of the core in a process: built once, inside the running loop, on first need.

Adapters hold a `ServiceHolder`; until the service is built, `readiness()` says why not.
The Functions worker imports `function_app.py` before any invocation and times out slow
imports, so building (and its heavy imports) happens on first use, never at import.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.errors import NotReady, ScoringError, SettingsError
from shared.settings import Settings

if TYPE_CHECKING:
    from shared.core.outcomes import OutcomeDesk
    from shared.core.service import ScoringService
    from shared.domain.answers import Readiness

__all__ = ["ServiceHolder"]

log = logging.getLogger(__name__)


class ServiceHolder:
    """Builds the service once, inside the running event loop, on first need.

    Until it is built, `readiness()` says why not: starting, a setting that is wrong
    (one line naming it), or the last failed start (retried on the next call).
    """

    def __init__(
        self,
        settings: Callable[[], Settings] = Settings.from_env,
        *,
        on_built: Sequence[Callable[[ScoringService], None]] = (),
    ) -> None:
        self._settings_factory = settings
        self._on_built = tuple(on_built)  # e.g. an adapter adding its server to the core's background jobs
        self._settings: Settings | None = None
        self._task: asyncio.Task[ScoringService] | None = None
        self._service: ScoringService | None = None
        self._outcomes: OutcomeDesk | None = None
        self.last_error: str | None = None

    @property
    def settings(self) -> Settings:
        """The settings, read on first use; a bad value raises `SettingsError` naming it."""
        if self._settings is None:
            self._settings = self._settings_factory()
        return self._settings

    def start(self) -> asyncio.Task[ScoringService]:
        """Begin building (idempotent); a failed build is retried by the next call."""
        task = self._task
        if task is not None and task.done() and (task.cancelled() or task.exception()):
            exc = None if task.cancelled() else task.exception()
            if exc is not None and not isinstance(exc, ScoringError):
                log.error("service start failed", exc_info=exc)
            self.last_error = "start cancelled" if exc is None else _public(exc)
            self._task = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._build(self.settings))
        return self._task

    async def _build(self, settings: Settings) -> ScoringService:
        from shared.core.wiring import build_service

        service = await build_service(settings)
        try:
            for hook in self._on_built:
                hook(service)
        except BaseException:
            await service.aclose()
            raise
        return service

    async def get(self) -> ScoringService:
        service = self.peek()  # NOTE: the per-request path: no future, no task
        if service is not None:
            return service
        try:
            return await asyncio.shield(self.start())
        except ScoringError:
            raise
        except Exception as exc:  # a foreign failure at start: its name only, the rest is logged
            raise NotReady(_public(exc)) from exc

    def peek(self) -> ScoringService | None:
        """The service if it is built, without starting anything."""
        task = self._task
        if (
            self._service is None
            and task is not None
            and task.done()
            and not task.cancelled()
            and task.exception() is None
        ):
            self._service = task.result()
        return self._service

    def outcomes(self) -> OutcomeDesk | None:
        """The outcome desk (shared/core/outcomes.py), built on first use, apart from the scoring
        service (outcomes need no model); None while the prediction log is off."""
        if self._outcomes is None:
            from shared.core.outcomes import build_outcomes
            from shared.core.wiring import replica_name

            settings = self.settings
            self._outcomes = build_outcomes(settings, replica_name(settings.prediction_log.replica))
        return self._outcomes

    def readiness(self) -> Readiness:
        """The service's readiness, or why there is no service yet (starting it if need be)."""
        from shared.domain.answers import Readiness

        service = self.peek()
        if service is not None:
            return service.readiness()
        try:
            self.start()
        except SettingsError as exc:
            return Readiness.refused(f"invalid settings: {exc.detail}", [])
        detail = f"start failed, retrying: {self.last_error}" if self.last_error else "starting"
        return Readiness.refused(detail, [])

    async def aclose(self) -> None:
        if self._outcomes is not None:
            desk, self._outcomes = self._outcomes, None
            await desk.aclose()
        if self._task is not None:
            service = self.peek()
            if not self._task.done():
                self._task.cancel()
            self._task = None
            self._service = None
            if service is not None:
                await service.aclose()


def _public(exc: BaseException | None) -> str:
    """What may be shown about a failed start: our own detail, or a foreign error's type."""
    if isinstance(exc, ScoringError):
        return exc.detail
    return f"{type(exc).__name__} (see the log)"
