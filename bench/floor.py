"""In-process measurements: raw ONNX Runtime on the model (the floor) and what the batcher adds."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.settings import BatchPolicy, OrtOptions


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def raw_onnxruntime(model_path: Path, n: int = 3000) -> dict[str, float]:
    """session.run on one row and on 8 rows, in a loop: the least a score can cost."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    width = session.get_inputs()[0].shape[1]
    out = {}
    for batch in (1, 8):
        x = np.random.default_rng(0).random((batch, width), dtype=np.float32)
        for _ in range(200):
            session.run(["probabilities"], {name: x})
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            session.run(["probabilities"], {name: x})
            samples.append(time.perf_counter() - t)
        out[f"run_b{batch}_us"] = _median_us(samples)
        out[f"rows_per_s_b{batch}"] = batch / statistics.median(samples)
    return out


async def _batcher_overhead(models_dir: Path, n: int) -> dict[str, float]:
    registry = ModelRegistry(DirectoryRepository(models_dir), OrtOptions(), BatchPolicy(window_ms=5, max_size=8))
    await registry.load_all()
    loaded = registry.active("fraud")
    row = np.random.default_rng(1).random(loaded.spec.width, dtype=np.float32)
    direct, batched = [], []
    for _ in range(n):  # interleaved, so both see the same machine
        t = time.perf_counter()
        loaded.model.predict(row[None, :])
        direct.append(time.perf_counter() - t)
        t = time.perf_counter()
        await loaded.score(row)
        batched.append(time.perf_counter() - t)
    await registry.aclose()
    return {
        "direct_us": _median_us(direct),
        "batched_us": _median_us(batched),
        "added_us": _median_us(batched) - _median_us(direct),
    }


def batcher_overhead(models_dir: Path, n: int = 3000) -> dict[str, float]:
    """Median latency of one lone request through the batcher vs calling the session directly."""
    return asyncio.run(_batcher_overhead(models_dir, n))
