"""A stand-in for the Python 3.13 worker's own process (the "proxy worker" of the host image).

The host image starts `worker.py`, which connects to the host over gRPC, puts the app's
dependencies first (the 3.13 worker isolates them: its DependencyManager) and hands every
request to `azure_functions_runtime`, the worker library that PyPI ships. That outer part is
not on PyPI; this module is the same few steps, read from azure-functions-python-worker's
`workers/proxy_worker/dispatcher.py`: a thread reads the host's stream, each request runs as a
task on the process's one plain asyncio loop (no uvloop), every log record at INFO and above
goes back to the host as an `RpcLog` message, and the library answers.

    python -m tests.worker.proxy --host 127.0.0.1 --port N --worker-id W --request-id R --protos DIR

`--report FILE`: at the end, what the process imported (versions, where from) and how long
the app's import took, as JSON. `--memory-publisher`: the queue path publishes into memory
(the app's own seam, `handlers.publisher`), and the report lists what it sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the app's directory first, as the worker does

from tests.worker import rpc

STOP = object()
HEAVY = ("numpy", "onnxruntime", "redis.asyncio", "starlette", "msgspec", "grpc", "azure.servicebus", "openai")


@dataclass
class Request:
    """What the proxy hands the library: `request.request` is the StreamingMessage."""

    name: str
    request: Any
    properties: dict[str, Any] | None = None


@dataclass
class Report:
    imported: dict[str, dict[str, str]] = field(default_factory=dict)
    heavy_after_index: list[str] = field(default_factory=list)
    index_s: float = 0.0
    init: str = ""


class GrpcLogs(logging.Handler):
    """The worker's AsyncLoggingHandler: each record becomes one RpcLog message to the host."""

    def __init__(self, protos: Any, outbox: queue.Queue[Any], request_id: str) -> None:
        super().__init__()
        self.protos, self.outbox, self.request_id = protos, outbox, request_id

    def emit(self, record: logging.LogRecord) -> None:
        log = self.protos.RpcLog
        level = (
            log.Error if record.levelno >= logging.ERROR else log.Warning if record.levelno >= 30 else log.Information
        )
        system = record.name.startswith(("proxy_worker", "azure_functions_runtime", "azure.functions"))
        category = log.RpcLogCategory.Value("System" if system else "User")
        message = log(level=level, message=self.format(record), category=record.name, log_category=category)
        self.outbox.put_nowait(self.protos.StreamingMessage(request_id=self.request_id, rpc_log=message))


class Proxy:
    def __init__(self, args: argparse.Namespace, protos: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.args, self.protos, self.loop = args, protos, loop
        self.outbox: queue.Queue[Any] = queue.Queue()
        self.done = loop.create_future()
        self.report = Report()
        import azure_functions_runtime as library

        self.library = library

    def poll(self) -> None:
        """The gRPC thread: the host's requests become tasks on the loop; answers go back in order sent."""
        channel = grpc.insecure_channel(f"{self.args.host}:{self.args.port}")
        stub = self.protos.FunctionRpcStub(channel)

        def outgoing() -> Any:
            while (message := self.outbox.get()) is not STOP:
                yield message

        try:
            for request in stub.EventStream(outgoing()):
                self.loop.call_soon_threadsafe(self.loop.create_task, self.dispatch(request))
        except grpc.RpcError:
            pass
        finally:
            self.loop.call_soon_threadsafe(lambda: self.done.done() or self.done.set_result(None))

    async def dispatch(self, request: Any) -> None:
        kind = request.WhichOneof("content")
        properties = {"protos": self.protos, "host": self.args.host}
        if kind == "worker_init_request":
            sys.path.insert(0, request.worker_init_request.function_app_directory)  # the app's directory
            self.library.start_threadpool_executor()
            started = time.perf_counter()
            answer = await self.library.worker_init_request(Request("WorkerInitRequest", request, properties))
            self.report.index_s = time.perf_counter() - started
            self.after_index()
            self.report.init = self.protos.StatusResult.Status.Name(answer.result.status)
            reply = self.protos.StreamingMessage(request_id=self.args.request_id, worker_init_response=answer)
        elif kind == "functions_metadata_request":
            answer = await self.library.functions_metadata_request(Request("WorkerMetadataRequest", request))
            reply = self.protos.StreamingMessage(request_id=request.request_id, function_metadata_response=answer)
        elif kind == "function_load_request":
            answer = await self.library.function_load_request(Request("FunctionLoadRequest", request))
            reply = self.protos.StreamingMessage(request_id=self.args.request_id, function_load_response=answer)
        elif kind == "invocation_request":
            logging.getLogger("proxy_worker").info(
                "Received FunctionInvocationRequest, request ID %s, function_id: %s, invocation_id: %s, worker_id: %s",
                self.args.request_id,
                request.invocation_request.function_id,
                request.invocation_request.invocation_id,
                self.args.worker_id,
            )
            answer = await self.library.invocation_request(Request("FunctionInvocationRequest", request))
            reply = self.protos.StreamingMessage(request_id=self.args.request_id, invocation_response=answer)
        else:
            return
        self.outbox.put_nowait(reply)

    def after_index(self) -> None:
        """What indexing imported (before the warm-up task it scheduled has run), and the seam."""
        for name in ("azure.functions", "google.protobuf", "grpc", "azure_functions_runtime"):
            module = sys.modules.get(name)
            if module is not None:
                version = getattr(module, "__version__", "") or getattr(getattr(module, "version", None), "VERSION", "")
                self.report.imported[name] = {"version": str(version), "file": str(module.__file__)}
        self.report.heavy_after_index = sorted(n for n in HEAVY if n in sys.modules and n != "grpc")
        if self.args.memory_publisher and "function_app" in sys.modules:
            from shared.adapters.queue.publisher import MemoryPublisher

            sys.modules["function_app"].handlers.publisher = MemoryPublisher()

    def published(self) -> list[dict[str, str]]:
        app = sys.modules.get("function_app")
        sent = getattr(getattr(getattr(app, "handlers", None), "publisher", None), "sent", [])
        return [{"queue": m.queue, "message_id": m.message_id, "body": m.body.decode()} for m in sent]


async def main(args: argparse.Namespace) -> None:
    protos = rpc.load(Path(args.protos))
    proxy = Proxy(args, protos, asyncio.get_running_loop())
    root = logging.getLogger()
    root.setLevel(logging.INFO)  # NOTE: as the worker sets it once the gRPC channel is up
    root.addHandler(GrpcLogs(protos, proxy.outbox, args.request_id))
    proxy.outbox.put_nowait(
        protos.StreamingMessage(request_id=args.request_id, start_stream=protos.StartStream(worker_id=args.worker_id))
    )
    thread = threading.Thread(target=proxy.poll, name="grpc_local-thread", daemon=True)
    thread.start()
    await proxy.done
    if args.report:
        body = {**proxy.report.__dict__, "published": proxy.published()}
        Path(args.report).write_text(json.dumps(body))
    proxy.outbox.put_nowait(STOP)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("--host", "--port", "--worker-id", "--request-id", "--protos"):
        parser.add_argument(name, required=True)
    parser.add_argument("--report")
    parser.add_argument("--memory-publisher", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse(sys.argv[1:])))
