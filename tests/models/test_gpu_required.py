"""ORT_REQUIRE_GPU: a replica asked to run on a GPU is not ready unless CUDA can run (these
machines have none, so the CPU image on a GPU profile, or a missing GPU, shows as not ready)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from shared.core.service import ScoringService
from shared.models.onnx import gpu_missing, gpu_usable
from shared.settings import OrtOptions, Settings


def test_a_gpu_that_is_not_asked_for_is_never_missing() -> None:
    assert gpu_missing(OrtOptions(require_gpu=False)) is None


def test_a_gpu_asked_for_where_cuda_cannot_run_is_missing_and_says_why() -> None:
    if gpu_usable():  # pragma: no cover - a GPU machine
        assert (
            gpu_missing(OrtOptions(require_gpu=True, use_gpu=False))
            == "ORT_REQUIRE_GPU is set, but ORT_USE_GPU is false"
        )
        return
    reason = gpu_missing(OrtOptions(require_gpu=True))
    assert reason is not None and reason.startswith("ORT_REQUIRE_GPU is set, but")


async def test_readiness_fails_while_the_gpu_it_requires_is_missing(
    services: Callable[[Settings], Awaitable[ScoringService]], settings: Settings
) -> None:
    service = await services(replace(settings, ort=replace(settings.ort, require_gpu=True)))
    readiness = service.readiness()
    if gpu_usable():  # pragma: no cover - a GPU machine
        assert readiness.ready
        return
    assert not readiness.ready and readiness.detail.startswith("ORT_REQUIRE_GPU is set")
    cpu = await services(settings)
    assert cpu.readiness().ready


def test_a_model_whose_session_fell_back_to_the_cpu_is_named() -> None:
    """The CPU image on a GPU: the CUDA provider is listed, its libraries are absent, the session runs on CPU."""
    reason = gpu_missing(OrtOptions(require_gpu=True), {"fraud": ["CPUExecutionProvider"]})
    assert reason is not None and reason.startswith("ORT_REQUIRE_GPU is set, but fraud runs on the CPU")
    if gpu_usable():  # pragma: no cover - a GPU machine
        assert gpu_missing(OrtOptions(require_gpu=True), {"fraud": ["CUDAExecutionProvider"]}) is None
