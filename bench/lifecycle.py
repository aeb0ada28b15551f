"""Model lifecycle figures: fleet convergence time, and memory over many swaps under load.

    .venv/bin/python -m bench.lifecycle [--uploads 20] [--swaps 200]   (REDIS_URL for convergence)

Convergence: two services in this process that share nothing but Redis and a model directory
(as two local instances do); each upload lands in the directory and is installed by replica A
(what the Blob trigger does on the one replica it fires on); the time until replica B answers
with the new version is measured. Swaps: one service installs `--swaps` versions one after the
other while a loop of concurrent score requests runs; RSS after the first 20 swaps and after
all of them, and the failed requests. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import orjson

from bench.loadgen import event_body
from shared.core.wiring import build_service
from shared.domain.events import decode_event
from shared.models.repository import DirectoryRepository, ModelRef
from shared.settings import Settings

DEMO = Path(__file__).resolve().parent.parent / "models" / "fraud" / "1" / "model.onnx"


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def workspace() -> tuple[Path, DirectoryRepository]:
    root = Path(tempfile.mkdtemp(prefix="lifecycle-")) / "models"
    source = DirectoryRepository(root)
    source.publish(ModelRef("fraud", "1"), DEMO.read_bytes())
    return root, source


async def convergence(uploads: int, redis_url: str) -> list[float]:
    root, source = workspace()
    settings = Settings(
        models_dir=str(root), redis_url=redis_url, redis_prefix=f"bench-{uuid.uuid4().hex[:8]}:",
        model_poll_s=0, gc_gen0_threshold=0,
    )  # fmt: skip
    a, b = await build_service(settings), await build_service(settings)
    body = decode_event(event_body(1))
    took: list[float] = []
    try:
        for version in range(2, uploads + 2):
            data = DEMO.read_bytes()
            source.publish(ModelRef("fraud", str(version)), data)
            started = time.perf_counter()
            await a.admin.install_model(ModelRef("fraud", str(version)), data)
            while (await b.score(body)).model_version != str(version):
                await asyncio.sleep(0.005)
            took.append(time.perf_counter() - started)
    finally:
        await a.aclose()
        await b.aclose()
    return took


async def swaps(count: int) -> dict[str, float]:
    root, _ = workspace()
    core = await build_service(Settings(models_dir=str(root), model_poll_s=0, gc_gen0_threshold=0))
    data = DEMO.read_bytes()
    failures, served, stop = 0, 0, asyncio.Event()

    async def load() -> None:
        nonlocal failures, served
        n = 0
        while not stop.is_set():
            results = await asyncio.gather(
                *(core.score(decode_event(event_body(n + i))) for i in range(8)), return_exceptions=True
            )
            failures += sum(isinstance(r, BaseException) for r in results)
            served += len(results)
            n += 8
            await asyncio.sleep(0)

    loop_task = asyncio.create_task(load())
    rss: dict[str, float] = {"start": rss_mib()}
    try:
        for version in range(2, count + 2):
            await core.admin.install_model(ModelRef("fraud", str(version)), data)
            if version - 1 == 20:
                rss["after_20"] = rss_mib()
        rss["after_all"] = rss_mib()
    finally:
        stop.set()
        await loop_task
        await core.aclose()
    return {**rss, "failed": failures, "served": served}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--swaps", type=int, default=200)
    args = parser.parse_args()
    report: dict[str, object] = {}
    redis_url = os.environ.get("REDIS_URL", "")
    if redis_url:
        took = await convergence(args.uploads, redis_url)
        report["convergence_s"] = {
            "median": round(statistics.median(took), 3),
            "max": round(max(took), 3),
            "n": len(took),
        }
    result = await swaps(args.swaps)
    report["swaps"] = {k: round(v, 1) for k, v in result.items()}
    growth = (result["after_all"] - result["after_20"]) / result["after_20"] * 100
    report["rss_growth_after_20_pct"] = round(growth, 2)
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    asyncio.run(main())
