"""Readiness: whether this replica can serve, why not, and what it serves with less than it should.

    not ready   a GPU it requires is missing, models still loading, DEFAULT_MODEL names nothing
                loaded, or a listener the replica is reached through failing
    degraded    every part's problem (shared/core/parts.py), admission shedding, the recent share of
                events scored on defaults, and what adapters report of their own dependencies

Each degraded reason starts with its component (`redis: `, `models: `, `overloaded: `, ...), which
the `scoring.degraded` metric carries as an attribute.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from shared.domain.answers import Readiness
from shared.models.onnx import gpu_missing
from shared.models.registry import ModelRegistry
from shared.runtime.background import Background
from shared.settings import Settings

__all__ = ["Health"]


class Health:
    """Readiness of the core, from its registry, its jobs and its parts."""

    def __init__(
        self,
        settings: Settings,
        registry: ModelRegistry,
        background: Background,
        problems: Sequence[Callable[[], str | None]],  # in the order readiness lists them
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._background = background
        self._problems = tuple(problems)
        self._reported: dict[str, tuple[str, float]] = {}  # component -> (problem, since): adapters' dependencies

    def readiness(self) -> Readiness:
        models = self._registry.names()
        if self._settings.ort.require_gpu:
            sessions = {m.name: m.providers for m in self._registry.describe()}  # what ORT really runs them on
            if (missing := gpu_missing(self._settings.ort, sessions)) is not None:
                return Readiness.refused(missing, models)
        if not self._registry.ready:
            return Readiness.refused("models are still loading", models)
        if self._settings.default_model not in models:
            return Readiness.refused(f"DEFAULT_MODEL {self._settings.default_model!r} names no loaded model", models)
        failing = self._background.failing()  # a port this replica is reached through does not serve
        if failing:
            why = "; ".join(f"{name}: {problem}" for name, problem in sorted(failing.items()))
            return Readiness.refused(f"a listener is failing and restarting ({why})", models)
        return Readiness.serving(models, self.degraded())

    def degraded(self) -> list[str]:
        """What the core serves with less than it should: it keeps serving, and says so."""
        reasons = [problem() for problem in self._problems]
        now = time.monotonic()
        reasons += [f"{name}: {problem}, for {now - since:.0f} s" for name, (problem, since) in self._reported.items()]
        return list(dict.fromkeys(r for r in reasons if r))  # NOTE: two parts over one store say it once

    def report(self, component: str, problem: str | None) -> None:
        """An adapter's own dependency (e.g. the queue's publisher) fails (`problem`) or works
        again (None): readiness lists it as degraded from the first failure until the next success."""
        if problem is None:
            self._reported.pop(component, None)
        else:
            since = self._reported.get(component, ("", time.monotonic()))[1]
            self._reported[component] = (problem, since)
