"""Replicas for the fleet's tests: registries that share nothing but Redis and a model source."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from shared.fleet.traffic import Traffic
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.settings import RolloutPolicy
from shared.stores.control import ControlStore
from tests.onnx_models import make_model

REPO = Path(__file__).resolve().parents[2]
WATCH_S = 0.05
POLICY = RolloutPolicy(canary_window=1000, canary_min_events=200, canary_max_decline_delta=0.05)
USERS = [f"user-{i}" for i in range(20_000)]


@dataclass
class Replica:
    registry: ModelRegistry
    rollout: Rollout
    traffic: Traffic
    control: ControlStore
    jobs: list[asyncio.Task[None]]

    def canary_users(self, users: list[str] = USERS[:2000]) -> set[str]:
        return {u for u in users if self.traffic.canary_for("fraud", u) is not None}

    def live(self) -> str:
        return self.registry.active("fraud").version

    async def aclose(self) -> None:
        for job in self.jobs:
            job.cancel()
        _, running = await asyncio.wait(self.jobs, timeout=5)
        assert not running  # NOTE: one cancel ends every watch (the control store honours it: gh-86296)
        await self.registry.aclose()
        await self.control.aclose()


Replicas = Callable[..., Awaitable[Replica]]


def publish(models_dir: Path, *versions: str) -> None:
    for version in versions:
        DirectoryRepository(models_dir).publish(ModelRef("fraud", version), make_model(bias=float(version)))


async def until(check: Callable[[], bool], seconds: float = 5.0) -> float:
    """Wait until `check()` holds (bounded); the time it took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "did not converge in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def pinned_pair(replicas: Replicas, models_dir: Path) -> tuple[Replica, Replica]:
    """Two replicas over fraud/1 and fraud/2 with 1 pinned fleet-wide: 2 is the candidate."""
    publish(models_dir, "2")
    a, b = await replicas(), await replicas()
    await a.rollout.pin("fraud", "1")
    await until(lambda: b.live() == "1")
    return a, b


def drive(traffic: Traffic, arm: str, events: int, declines_per_100: int, errors_per_100: int = 0) -> None:
    """`events` decisions of one arm, as evenly spread as counts allow: so many declines and errors per 100."""
    declines = errors = 0
    for i in range(1, events + 1):
        if errors < i * errors_per_100 // 100:
            errors, decision = errors + 1, "error"
        elif declines < i * declines_per_100 // 100:
            declines, decision = declines + 1, "decline"
        else:
            decision = "approve"
        traffic.observe("fraud", arm, decision)  # type: ignore[arg-type]
