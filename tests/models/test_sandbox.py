"""The trial: a file that passes the static checks is still run in a child under caps first.

The serving process never pays for a hostile file: its RSS stays within +50 MiB, and
liveness and scoring answer throughout the attempt.
"""

from __future__ import annotations

import asyncio
import ctypes
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from msgspec import to_builtins

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.core.service import ScoringService
from shared.errors import ModelInvalid
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.sandbox import Sandbox, SandboxLimits, child_env
from shared.models.vetting import VettingPolicy
from shared.settings import BatchPolicy, OrtOptions, Settings
from tests.conftest import event
from tests.models import hostile
from tests.onnx_models import make_model

MiB = 1024 * 1024
LOOPS = VettingPolicy(allowed_control_flow=frozenset({"Loop"}))  # NOTE: past the static check, to the sandbox


def rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


@dataclass
class Watch:
    """What the serving process did while a trial ran: RSS peak, answers and their slowest."""

    base: int = field(default_factory=rss)
    peak: int = 0
    live: int = 0
    scored: int = 0
    versions: set[str] = field(default_factory=set)
    slowest_s: float = 0.0


async def watch_while(attempt: asyncio.Task[Any], client: httpx.AsyncClient) -> Watch:
    seen = Watch()
    amount = 10.0
    while not attempt.done():
        started = time.perf_counter()
        live = await client.get("/api/health/live")
        amount += 1.0  # NOTE: a new row each time: the model runs, no cache answers
        scored = await client.post("/api/score", json=event(amount=amount))
        seen.slowest_s = max(seen.slowest_s, time.perf_counter() - started)
        assert live.status_code == 200 and scored.status_code == 200, (live.text, scored.text)
        seen.live, seen.scored = seen.live + 1, seen.scored + 1
        seen.versions.add(scored.json()["model_version"])
        seen.peak = max(seen.peak, rss())
        await asyncio.sleep(0.02)
    return seen


@pytest.fixture
async def served(settings: Settings) -> AsyncIterator[tuple[ScoringService, httpx.AsyncClient]]:
    """The app over the tiny model, through its HTTP routes (the same process serves and tries)."""
    holder = ServiceHolder(lambda: settings)
    service = await holder.get()
    transport = httpx.ASGITransport(app=create_app(holder))
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as client:
        yield service, client
    await holder.aclose()


async def test_a_memory_bomb_is_refused_while_the_serving_process_stays_flat_and_answers(
    served: tuple[ScoringService, httpx.AsyncClient],
) -> None:
    service, client = served
    await client.post("/api/score", json=event())  # NOTE: warm the route before the baseline
    attempt = asyncio.create_task(service.admin.install_model(ModelRef("fraud", "2"), hostile.doubling()))
    seen = await watch_while(attempt, client)
    assert (seen.peak - seen.base) < 50 * MiB, f"RSS grew {(seen.peak - seen.base) / MiB:.0f} MiB"
    with pytest.raises(ModelInvalid, match=r"refused by the sandbox \(memory 1024 MiB"):
        attempt.result()
    assert seen.live >= 3 and seen.versions == {"1"}, seen
    assert seen.slowest_s < 0.5, f"an answer took {seen.slowest_s * 1000:.0f} ms during the trial"
    [described] = to_builtins(service.models())
    assert described["last_error"]["version"] == "2" and "sandbox" in described["last_error"]["reason"]


def test_a_never_ending_loop_is_stopped_by_the_run_deadline_in_the_trial() -> None:
    started = time.perf_counter()
    with pytest.raises(ModelInvalid, match=r"warm-up failed: a run was stopped past its 50 ms deadline"):
        Sandbox(SandboxLimits(wall_s=30), LOOPS).trial(hostile.endless_loop())
    assert time.perf_counter() - started < 10


async def test_a_never_ending_loop_is_stopped_by_its_cpu_deadline(models_dir: Path) -> None:
    """With the run deadline out of the way (10 min), the child's CPU cap still stops it."""
    sandbox = Sandbox(SandboxLimits(cpu_s=2, wall_s=30), LOOPS, run_deadline_ms=600_000)
    registry = ModelRegistry(
        DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(max_size=8), sandbox=sandbox, vetting=LOOPS
    )
    await registry.load_all()
    try:
        started = time.perf_counter()
        with pytest.raises(ModelInvalid, match=r"more than its 2 s of CPU time"):
            await registry.install("fraud", "2", hostile.endless_loop())
        assert time.perf_counter() - started < 10
        assert "CPU time" in registry.last_error("fraud").reason  # type: ignore[union-attr] and registry.active("fraud").version == "1"
    finally:
        await registry.aclose()


def test_a_trial_past_its_wall_clock_is_killed() -> None:
    sandbox = Sandbox(SandboxLimits(cpu_s=60, wall_s=2), LOOPS, run_deadline_ms=600_000)
    started = time.perf_counter()
    with pytest.raises(
        ModelInvalid, match=r"wall 2 s, runs 600000 ms and 64 MiB\): loading and warm-up did not finish in time"
    ):
        sandbox.trial(hostile.endless_loop())
    assert time.perf_counter() - started < 6


def test_a_good_file_passes_once_and_is_not_tried_again() -> None:
    sandbox = Sandbox(SandboxLimits(wall_s=30))
    data = make_model(bias=0.25)
    first = sandbox.trial(data)
    assert first.seconds > 0 and sandbox.trial(data) is first


def _unshare_allowed() -> bool:
    import subprocess
    import sys

    probe = "import ctypes,sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000 | 0x40000000) != 0)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def test_the_trial_has_no_network_where_the_kernel_allows_a_namespace() -> None:
    verdict = Sandbox(SandboxLimits(wall_s=30)).trial(make_model(bias=0.5))
    assert verdict.network_isolated is _unshare_allowed()
    assert ctypes.CDLL(None) is not None  # NOTE: the check above ran in a child; this process keeps its network


def test_the_child_finds_what_the_serving_process_imports_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import sys

    monkeypatch.setenv("ModelStorage", "DefaultEndpointsProtocol=https;AccountKey=c2VjcmV0")
    env = child_env()
    assert set(env) == {"PATH", "PYTHONPATH", "PYTHONNOUSERSITE", "OMP_NUM_THREADS"}
    assert set(env["PYTHONPATH"].split(os.pathsep)) >= {p for p in sys.path if p and os.path.isdir(p)}


async def test_a_stacking_meta_model_is_tried_in_the_sandbox_too(
    models_dir: Path, settings: Settings, services: Callable[[Settings], Awaitable[ScoringService]]
) -> None:
    from tests.models.ensembles.test_ensembles import B_FEATURES, MEMBERS, add_model, declare

    add_model(models_dir, "fraud_b", "1", make_model(bias=-2.0, features=B_FEATURES))
    folder = declare(models_dir, "stack", {"members": MEMBERS, "method": "stacking", "meta_model": "meta.onnx"})
    (folder / "meta.onnx").write_bytes(hostile.doubling())
    base = rss()
    service = await services(settings)
    assert rss() - base < 100 * MiB  # NOTE: the service's own start-up (two models, the app) included
    assert not service.model_ready("stack")
    assert "refused by the sandbox" in str(to_builtins(service.models())[-1]["last_error"])


# -- the trial scores as an attacker would (issue 54) ---------------------------------------------

PAST_STATIC = VettingPolicy(static_shapes=False, extra_ops=frozenset({"ConstantOfShape", "Expand", "Tile", "Range"}))


@pytest.mark.parametrize("op", ["ConstantOfShape", "Range"])
def test_a_file_harmless_on_its_defaults_is_refused_by_the_trials_adversarial_rows(op: str) -> None:
    """Past the static checks on purpose: warm-up on the defaults passes (OnnxModel.warm in
    tests/models/test_bounds.py: the old trial's whole work); a feature at 1 (64 Ki x 1024 floats) does not."""
    data = hostile.input_sized(op)
    with pytest.raises(
        ModelInvalid, match=rf"refused by the sandbox .*: scoring features at 1: .*memory cap .*: {op} asked for"
    ):
        Sandbox(SandboxLimits(wall_s=60), PAST_STATIC).trial(data)


def test_the_trial_keeps_the_highest_score_its_rows_produced() -> None:
    verdict = Sandbox(SandboxLimits(wall_s=60)).trial(make_model(bias=0.125))
    assert 0.99 <= verdict.max_score <= 1.0 and verdict.slowest_run_ms > 0 and verdict.peak_rss_mb > 0
