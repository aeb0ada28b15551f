import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from msgspec import to_builtins

from shared.errors import ModelInvalid, ModelNotFound, NotReady
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.settings import BatchPolicy, OrtOptions
from tests.onnx_models import make_model

Closing = Callable[[ModelRegistry], ModelRegistry]


def registry(root: Path, keep: int = 2) -> ModelRegistry:
    return ModelRegistry(DirectoryRepository(root), OrtOptions(), BatchPolicy(window_ms=5, max_size=8), keep)


def row() -> np.ndarray:
    return np.zeros(4, dtype=np.float32)


async def test_newest_version_is_active(closing: Closing, models_dir: Path) -> None:
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(make_model(bias=2.0))
    reg = closing(registry(models_dir))
    with pytest.raises(NotReady):
        reg.active("fraud")
    await reg.load_all()
    assert reg.active("fraud").version == "2"
    assert reg.loaded_versions("fraud") == ["1", "2"]
    assert (await reg.active("fraud").score(row())).value.score == pytest.approx(1 / (1 + np.exp(-2.0)))
    [described] = to_builtins(reg.describe())
    assert described["active_version"] == "2" and described["providers"] == ["CPUExecutionProvider"]


async def test_unknown_model_is_not_found(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir))
    await reg.load_all()
    with pytest.raises(ModelNotFound):
        reg.active("nope")


async def test_empty_source_is_not_ready(tmp_path: Path) -> None:
    with pytest.raises(NotReady):
        await registry(tmp_path).load_all()


async def test_install_swaps_in_a_new_version_and_releases_beyond_keep(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir, keep=2))
    await reg.load_all()
    v1 = reg.active("fraud")
    await reg.install("fraud", "2", make_model(bias=1.0))
    await reg.install("fraud", "3", make_model(bias=3.0))
    assert reg.active("fraud").version == "3"
    assert reg.loaded_versions("fraud") == ["2", "3"]
    with pytest.raises(Exception, match=r"released|draining"):
        await v1.score(row())


async def test_requests_queued_on_the_old_version_finish_during_a_swap(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir, keep=1))
    await reg.load_all()
    old = reg.active("fraud")
    pending = [asyncio.ensure_future(old.score(row())) for _ in range(20)]
    await reg.install("fraud", "2", make_model(bias=1.0))
    results = await asyncio.gather(*pending)
    assert all(r.value.score == pytest.approx(0.5) for r in results)
    assert reg.active("fraud").version == "2"


async def test_invalid_upload_keeps_the_active_version(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir))
    await reg.load_all()
    with pytest.raises(ModelInvalid):
        await reg.install("fraud", "9", b"garbage")
    assert reg.active("fraud").version == "1"
    assert reg.loaded_versions("fraud") == ["1"]


async def test_an_older_upload_does_not_replace_the_newer_active(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir, keep=3))
    await reg.install("fraud", "5", make_model())
    await reg.install("fraud", "4", make_model())
    assert reg.active("fraud").version == "5"


async def test_a_bad_newest_file_is_skipped_at_start(models_dir: Path) -> None:
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(b"corrupt upload")
    reg = registry(models_dir)
    await reg.load_all()
    assert reg.active("fraud").version == "1" and reg.ready


async def test_no_valid_model_at_all_is_not_ready(tmp_path: Path) -> None:
    (tmp_path / "fraud" / "1").mkdir(parents=True)
    (tmp_path / "fraud" / "1" / "model.onnx").write_bytes(b"corrupt")
    with pytest.raises(NotReady, match="no valid model"):
        await registry(tmp_path).load_all()


async def test_score_column_outside_the_output_is_model_invalid(models_dir: Path) -> None:
    from shared.domain.spec import FeatureDef, ModelSpec, Thresholds

    features = tuple(
        FeatureDef(n, 0.0) for n in ("log_amount", "channel=web", "user_avg_amount_30d", "user_txn_count_24h")
    )
    meta = ModelSpec(features, "features", "probabilities", 5, Thresholds(0.5, 0.9)).to_metadata()
    with pytest.raises(ModelInvalid, match="score column 5"):
        await registry(models_dir).install("fraud", "3", make_model(metadata=meta))


async def test_a_model_run_off_the_loop_lets_a_second_batch_form_within_the_window(models_dir: Path) -> None:
    reg = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(inline=False), BatchPolicy(window_ms=5, max_size=8))
    await reg.load_all()
    loaded = reg.active("fraud")
    results = await asyncio.gather(*(loaded.score(np.full(4, i, dtype=np.float32)) for i in range(16)))
    assert all(0 <= r.value.score <= 1 for r in results)
    assert loaded.batcher.batches == 2
    await reg.aclose()


async def test_hooks_follow_the_lifecycle_and_a_broken_hook_undoes_nothing(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir, keep=1))
    seen: list[tuple[str, str]] = []
    for kind in ("loaded", "activated", "retired", "failed"):
        reg.on(kind, lambda e: seen.append((e.kind, e.version)))  # type: ignore[arg-type]
    reg.on("activated", lambda e: 1 / 0)  # type: ignore[arg-type, func-returns-value]
    await reg.load_all()
    await reg.install("fraud", "2", make_model(bias=1.0))
    with pytest.raises(ModelInvalid):
        await reg.install("fraud", "3", b"not onnx")
    assert seen == [
        ("loaded", "1"),
        ("activated", "1"),
        ("loaded", "2"),
        ("activated", "2"),
        ("retired", "1"),
        ("failed", "3"),
    ]
    assert reg.active("fraud").version == "2"


async def test_installing_the_same_file_again_changes_nothing(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir))
    await reg.load_all()
    data = make_model(bias=1.0)
    first = await reg.install("fraud", "2", data)
    events: list[str] = []
    reg.on("loaded", lambda e: events.append(e.kind))
    again = await reg.install("fraud", "2", data)
    assert again is first and events == []
    assert (await first.score(row())).value.source in ("l1", "model")  # still serving: not retired


async def test_a_named_version_is_served_and_an_unknown_one_is_not_found(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir))
    await reg.load_all()
    await reg.install("fraud", "2", make_model(bias=1.0))
    assert reg.active("fraud", "1").version == "1" and reg.active("fraud").version == "2"
    with pytest.raises(ModelNotFound, match="no loaded version '9'"):
        reg.active("fraud", "9")


async def test_an_absurd_version_never_becomes_active_for_good(closing: Closing, models_dir: Path) -> None:
    reg = closing(registry(models_dir))
    await reg.load_all()
    for name, version in (("fraud", "9" * 64), ("..", "1")):
        with pytest.raises(ModelInvalid, match="must"):
            await reg.install(name, version, make_model(bias=1.0))
    await reg.install("fraud", "2", make_model(bias=1.0))
    assert reg.active("fraud").version == "2" and reg.names() == ["fraud"]
