"""A version starved of CPU at its warm-up waits before its next trial (shared/models/registry.py
`load`, STARVED_WAIT_S): a trial is work, on a replica already short of CPU. The wait doubles while
the version stays starved, and a load that succeeds clears it. The starving itself is real in
tests/models/test_starved_warmup.py; here `install` answers starved, so the waits can be counted."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from shared.errors import WarmupStarved
from shared.models import registry as registry_module
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.served import LoadedModel
from shared.settings import BatchPolicy, OrtOptions
from tests.onnx_models import make_model

REF = ModelRef("fraud", "2")


async def test_a_starved_version_waits_before_its_next_trial_and_the_wait_doubles(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "STARVED_WAIT_S", (0.3, 0.6))
    source = DirectoryRepository(models_dir)
    registry = ModelRegistry(source, OrtOptions(use_gpu=False), BatchPolicy(max_size=8), auto_promote=True)
    await registry.load_all()
    source.publish(REF, make_model(bias=0.25))
    install, trials, starving = registry.install, [], [True]

    async def counted(name: str, version: str, data: bytes, *, stamp: str = "") -> LoadedModel:
        trials.append(asyncio.get_running_loop().time())
        if starving[0]:
            raise WarmupStarved("a warm-up run was starved of CPU each of its 3 tries")
        return await install(name, version, data, stamp=stamp)

    monkeypatch.setattr(registry, "install", counted)
    try:
        for _ in range(40):  # NOTE: a load every 50 ms, as a busy poll and record watch could ask
            with pytest.raises(WarmupStarved):
                await registry.load(REF)
            await asyncio.sleep(0.05)
        gaps = [b - a for a, b in itertools.pairwise(trials)]
        assert 3 <= len(trials) <= 4, trials  # 40 loads in ~2 s: trials at 0, 0.3, 0.9 (and 1.5) s
        assert gaps[0] >= 0.3 and all(gap >= 0.6 for gap in gaps[1:]), gaps  # the wait doubled, then capped
        assert registry.last_error("fraud") is None  # waited for, never refused
        starving[0] = False
        await asyncio.sleep(0.7)
        assert await registry.load(REF) is not None and registry.active("fraud").version == "2"
    finally:
        await registry.aclose()
