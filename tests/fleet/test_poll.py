"""The poll's pass over the model source: a version starved of CPU at its warm-up holds back itself,
not the other models (shared/fleet/versions.py `poll_once`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import WarmupStarved
from shared.fleet.versions import Rollout
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository, ModelRef
from shared.models.served import LoadedModel
from shared.settings import BatchPolicy, OrtOptions
from tests.onnx_models import make_model


async def test_a_starved_version_holds_back_itself_not_the_other_models(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = DirectoryRepository(models_dir)
    source.publish(ModelRef("other", "1"), make_model())
    registry = ModelRegistry(source, OrtOptions(use_gpu=False), BatchPolicy(max_size=8), auto_promote=True)
    rollout = Rollout(registry, source, None, poll_s=0)
    await registry.load_all()
    source.publish(ModelRef("fraud", "2"), make_model(bias=0.25))
    source.publish(ModelRef("other", "2"), make_model(bias=0.25))
    load = registry.load

    async def starved_fraud(ref: ModelRef) -> LoadedModel | None:
        if ref == ModelRef("fraud", "2"):
            raise WarmupStarved("a warm-up run was starved of CPU each of its 3 tries")
        return await load(ref)

    monkeypatch.setattr(registry, "load", starved_fraud)
    try:
        await rollout.poll_once()  # NOTE: "fraud" comes first in the source's listing
        assert (registry.active("fraud").version, registry.active("other").version) == ("1", "2")
        monkeypatch.setattr(registry, "load", load)  # the CPU is back
        await rollout.poll_once()
        assert registry.active("fraud").version == "2"
    finally:
        await registry.aclose()
