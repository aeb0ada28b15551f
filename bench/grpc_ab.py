"""Two versions of the V2 gRPC server module, A/B in one process: each serves the same core on its own
port, and batches of 200 sequential calls alternate between them (20 each, ABBA order); process CPU per
call (client and server together), median of the batches. Interleaving cancels a busy machine's drift.

    git show 0969619:shared/adapters/oip/grpc_server.py > /tmp/grpc_before.py
    A=/tmp/grpc_before.py B=shared/adapters/oip/grpc_server.py .venv/bin/python -m bench.grpc_ab [ModelInfer|ServerLive]
"""

import asyncio
import importlib.util
import os
import statistics
import sys
import time
from typing import Any

import grpc
import numpy as np

from shared.adapters.oip import grpc_predict_v2_pb2 as pb
from shared.core.wiring import build_service
from shared.settings import Settings


def load(name: str, path: str) -> Any:
    """The server module at `path` (a file), under its own name."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


old = load("grpc_server_a", os.environ["A"])
new = load("grpc_server_b", os.environ.get("B", "shared/adapters/oip/grpc_server.py"))
METHOD = sys.argv[1] if len(sys.argv) > 1 else "ModelInfer"


async def main() -> None:
    service = await build_service(Settings(gc_gen0_threshold=0, grpc_keys="k" * 32))
    stubs, tasks = {}, []
    for name, mod, port in (("before", old, 29811), ("after", new, 29812)):
        tasks.append(asyncio.create_task(mod.serve_grpc(service, "127.0.0.1", port, grace_s=0.1)))
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        await asyncio.wait_for(ch.channel_ready(), 10)
        resp = pb.ModelInferResponse if METHOD == "ModelInfer" else pb.ServerLiveResponse
        stubs[name] = ch.unary_unary(
            f"/inference.GRPCInferenceService/{METHOD}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=resp.FromString,
        )
    md = (("x-api-key", "k" * 32),)

    def req(i):
        if METHOD != "ModelInfer":
            return pb.ServerLiveRequest()
        r = pb.ModelInferRequest(model_name="fraud")
        r.inputs.add(name="features", datatype="FP32", shape=[1, 25])
        r.raw_input_contents.append(np.full((1, 25), i % 997 / 10, dtype=np.float32).tobytes())
        return r

    for name in stubs:
        for i in range(300):
            await stubs[name](req(i), metadata=md, timeout=10)
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    for b in range(40):
        name = ("before", "after")[b % 2] if (b // 2) % 2 == 0 else ("after", "before")[b % 2]
        c = time.process_time()
        for i in range(200):
            await stubs[name](req(200 * b + i), metadata=md, timeout=10)
        cpu[name].append((time.process_time() - c) / 200 * 1e6)
    first, second = statistics.median(cpu["before"]), statistics.median(cpu["after"])
    print(
        f"{METHOD}: A {first:.0f} µs, B {second:.0f} µs CPU per call (client and server, one process; median of "
        f"20 batches of 200, interleaved): {second - first:+.0f} µs ({second / first:.3f}x); "
        f"load {os.getloadavg()[0]:.2f}"
    )
    for t in tasks:
        t.cancel()
    await service.aclose()


asyncio.run(main())
