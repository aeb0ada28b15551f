"""Run inside a Python 3.11 process with one of the 3.11 worker's bundles first on sys.path, either
the 2024 one (protobuf 4.25, grpcio 1.59) or the 2026 one production runs (protobuf 5.29, grpcio 1.70;
tests/worker/test_bundled.py starts it under each): index the app as that worker does and import
every module the app loads at run time, then serve one V2 gRPC call. Prints one JSON line.

The 3.11 worker (azure-functions-python-worker 4.x, not on PyPI) refuses a binding annotation
that is not a class or a `typing` generic: `list[X]` is a `types.GenericAlias`, which its
`functions.py` reports as "invalid non-type annotation" (azure-functions-python-worker#1034).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import types
from typing import Any

# What the app imports when it runs (the warm-up's list and the lazily imported adapters), on top of the index.
RUNTIME_MODULES = (
    "numpy", "onnxruntime", "redis.asyncio", "shared.core.service", "shared.core.wiring", "azure.servicebus.aio",
    "azure.identity.aio", "aiohttp", "shared.adapters.oip.grpc_server", "shared.adapters.oip.grpc_predict_v2_pb2",
    "uvicorn", "shared.adapters.http.server", "shared.telemetry.setup", "azure.monitor.opentelemetry",
    "azure.storage.blob.aio", "openai", "shared.adapters.http.openapi",
)  # fmt: skip


def refused(functions: list[Any]) -> list[str]:
    """The worker loader's rule on each binding parameter of each function."""
    problems = []
    for function in functions:
        user = function.get_user_function()
        hints = inspect.signature(user).parameters
        for binding in function.get_bindings():
            annotation = hints[binding.name].annotation if binding.name in hints else None
            if isinstance(annotation, types.GenericAlias):
                problems.append(
                    f"{function.get_function_name()}: binding {binding.name} has invalid non-type annotation {annotation!r}"
                )
    return problems


async def one_grpc_call() -> bool:
    import grpc

    from shared.adapters.oip import grpc_predict_v2_pb2 as pb
    from shared.adapters.oip.jobs import grpc_server
    from shared.core.holder import ServiceHolder
    from shared.settings import Settings

    probe = __import__("socket").create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    holder = ServiceHolder(lambda: Settings.from_env({"GRPC_PORT": str(port)}), on_built=[grpc_server("127.0.0.1")])
    service = await holder.get()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            live = channel.unary_unary(
                "/inference.GRPCInferenceService/ServerLive",
                request_serializer=pb.ServerLiveRequest.SerializeToString,
                response_deserializer=pb.ServerLiveResponse.FromString,
            )
            for _ in range(100):
                try:
                    return bool((await live(pb.ServerLiveRequest(), timeout=2)).live) and service.readiness().ready
                except grpc.aio.AioRpcError:
                    await asyncio.sleep(0.05)
            return False
    finally:
        await holder.aclose()


def main() -> None:
    import azure.functions
    import google.protobuf
    import grpc

    versions = {
        "azure-functions": azure.functions.__version__,
        "protobuf": google.protobuf.__version__,
        "grpcio": grpc.__version__,
    }
    app = importlib.import_module("function_app").app
    functions = app.get_functions()
    failed = {}
    for name in RUNTIME_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    from azure.identity.aio import DefaultAzureCredential

    DefaultAzureCredential()  # NOTE: needs aiohttp; nothing is asked of the network until a token is
    grpc_live, grpc_error = False, None
    try:
        grpc_live = asyncio.run(one_grpc_call())
    except Exception as exc:  # NOTE: reported, as an import failure is: the test names the reason
        grpc_error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"versions": versions, "functions": len(functions), "refused": refused(functions),
                      "failed": failed, "grpc_live": grpc_live, "grpc_error": grpc_error,
                      "path0": sys.path[0]}))  # fmt: skip


if __name__ == "__main__":
    main()
