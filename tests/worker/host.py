"""A stand-in for the Functions host's side of the worker protocol (FunctionRpc.EventStream).

It serves the host's gRPC service on a loopback port, starts the worker stand-in
(tests/worker/proxy.py) in the conformance venv, and drives it as the host does: StartStream,
WorkerInitRequest (the worker indexes the app), FunctionsMetadataRequest, one
FunctionLoadRequest per function, then InvocationRequests built as the host builds them (an
HTTP trigger's RpcHttp; a Service Bus batch as collection data plus `...Array` trigger
metadata; a blob's bytes with its `BlobTrigger` path and `Properties`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import queue
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tests.worker import rpc

__all__ = ["Answer", "Host", "running_worker"]

REPO = rpc.REPO
STOP = object()


@dataclass
class Answer:
    """An HTTP function's answer, decoded from the InvocationResponse."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Host:
    """The host's end of one worker's stream."""

    protos: Any
    outbox: queue.Queue[Any] = field(default_factory=queue.Queue)
    replies: queue.Queue[Any] = field(default_factory=queue.Queue)
    pending: dict[str, concurrent.futures.Future[Any]] = field(default_factory=dict)
    logs: list[Any] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    functions: dict[str, Any] = field(default_factory=dict)  # name -> RpcFunctionMetadata
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the gRPC service ----------------------------------------------------------------

    def EventStream(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        threading.Thread(target=self._read, args=(requests,), daemon=True).start()
        while (message := self.outbox.get()) is not STOP:
            yield message

    def _read(self, requests: Iterator[Any]) -> None:
        with contextlib.suppress(grpc.RpcError):
            for message in requests:
                kind = message.WhichOneof("content")
                if kind == "start_stream":
                    self.started.set()
                elif kind == "rpc_log":
                    self.logs.append(message.rpc_log)
                elif kind == "invocation_response":
                    with self.lock:
                        future = self.pending.pop(message.invocation_response.invocation_id)
                    future.set_result(message.invocation_response)
                else:
                    self.replies.put(getattr(message, kind))

    # -- what the host sends -------------------------------------------------------------

    def ask(self, timeout: float = 60, **content: Any) -> Any:
        self.outbox.put(self.protos.StreamingMessage(request_id=str(uuid.uuid4()), **content))
        return self.replies.get(timeout=timeout)

    def start(self, app_dir: Path, timeout: float = 60) -> Any:
        """Init (the worker indexes `app_dir`), then metadata and load: the WorkerInitResponse."""
        p = self.protos
        if not self.started.wait(timeout):
            raise TimeoutError("the worker never opened its stream")
        init = self.ask(
            timeout,
            worker_init_request=p.WorkerInitRequest(
                host_version="4.1040.0", function_app_directory=str(app_dir), capabilities={}
            ),
        )
        if init.result.status != p.StatusResult.Success:
            return init
        metadata = self.ask(
            timeout, functions_metadata_request=p.FunctionsMetadataRequest(function_app_directory=str(app_dir))
        )
        for meta in metadata.function_metadata_results:
            self.functions[meta.name] = meta
            loaded = self.ask(
                timeout, function_load_request=p.FunctionLoadRequest(function_id=meta.function_id, metadata=meta)
            )
            assert loaded.result.status == p.StatusResult.Success, loaded
        return init

    def invoke_async(
        self,
        function: str,
        inputs: Sequence[Any],
        trigger_metadata: dict[str, Any] | None = None,
        *,
        traceparent: str = "",
    ) -> concurrent.futures.Future[Any]:
        """`traceparent`: the W3C context the host passes on (the caller's, or the host's own span)."""
        p = self.protos
        invocation_id = str(uuid.uuid4())
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            self.pending[invocation_id] = future
        request = p.InvocationRequest(
            invocation_id=invocation_id,
            function_id=self.functions[function].function_id,
            input_data=list(inputs),
            trigger_metadata=trigger_metadata or {},
            trace_context=p.FunctionRpc_pb2.RpcTraceContext(trace_parent=traceparent) if traceparent else None,
        )
        self.outbox.put(p.StreamingMessage(request_id=str(uuid.uuid4()), invocation_request=request))
        return future

    def invoke(
        self, function: str, inputs: Sequence[Any], trigger_metadata: dict[str, Any] | None = None, timeout: float = 60
    ) -> Any:
        return self.invoke_async(function, inputs, trigger_metadata).result(timeout)

    # -- the host's bindings -------------------------------------------------------------

    def http(self, function: str, method: str, path: str, body: bytes = b"", *, params: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> Any:  # fmt: skip
        """The InvocationRequest input of an HTTP trigger (the worker asked for raw body bytes)."""
        p = self.protos
        head = {"content-type": "application/json", "x-functions-key": "k", **(headers or {})}
        request = p.RpcHttp(
            method=method,
            url=f"http://localhost:7071{path}",
            headers=head,
            params=params or {},
            body=p.TypedData(bytes=body),
        )
        return [p.ParameterBinding(name="req", data=p.TypedData(http=request))]

    def call(self, function: str, method: str, path: str, body: bytes = b"", **kw: Any) -> Answer:
        response = self.invoke(function, self.http(function, method, path, body, **kw))
        return self.answer(response)

    def answer(self, response: Any) -> Answer:
        if response.result.status != self.protos.StatusResult.Success:
            raise AssertionError(f"the invocation failed: {response.result.exception.message}")
        http = response.return_value.http
        body = http.body
        data = getattr(body, body.WhichOneof("data")) if body.WhichOneof("data") else b""
        return Answer(
            int(http.status_code or 200), dict(http.headers), data if isinstance(data, bytes) else data.encode()
        )

    def batch(self, messages: Sequence[tuple[str, bytes]]) -> tuple[list[Any], dict[str, Any]]:
        """A `cardinality: many` Service Bus batch with dataType binary: bodies as collection_bytes,
        each property as a JSON array under `<Name>Array`, as the host's Service Bus extension sends it."""
        p = self.protos
        ids = [m for m, _ in messages]
        bodies = [b for _, b in messages]
        arrays = {
            "MessageIdArray": ids,
            "DeliveryCountArray": [1] * len(ids),
            # NOTE: .NET writes seven fractional digits (azure-functions-python-worker#269)
            "EnqueuedTimeUtcArray": ["2026-12-01T09:00:00.1234567Z"] * len(ids),
            "ExpiresAtUtcArray": ["2026-12-15T09:00:00.1234567Z"] * len(ids),
            "LockedUntilArray": ["2026-12-01T09:01:00.1234567Z"] * len(ids),
            "SequenceNumberArray": list(range(1, len(ids) + 1)),
            "CorrelationIdArray": [f"corr-{m}" for m in ids],
            "UserPropertiesArray": [{} for _ in ids],
            "ApplicationPropertiesArray": [{} for _ in ids],
            "ContentTypeArray": ["application/json"] * len(ids),
        }
        metadata = {name: p.TypedData(json=json.dumps(value)) for name, value in arrays.items()}
        data = p.TypedData(collection_bytes=p.FunctionRpc_pb2.CollectionBytes(bytes=bodies))
        return [p.ParameterBinding(name="msgs", data=data)], metadata

    def blob(self, path: str, content: bytes) -> tuple[list[Any], dict[str, Any]]:
        """A blob trigger: the whole blob as bytes, its path and properties as trigger metadata."""
        p = self.protos
        metadata = {
            "BlobTrigger": p.TypedData(string=path),
            "Uri": p.TypedData(string=f"http://127.0.0.1:10000/devstoreaccount1/{path}"),
            "Properties": p.TypedData(json=json.dumps({"ContentLength": len(content), "Length": len(content)})),
            "Metadata": p.TypedData(json="{}"),
        }
        return [p.ParameterBinding(name="blob", data=p.TypedData(bytes=content))], metadata

    def stop(self) -> None:
        self.outbox.put(STOP)


@contextlib.contextmanager
def running_worker(env: dict[str, str], *, report: Path | None = None, memory_publisher: bool = True,
                   timeout: float = 60) -> Iterator[tuple[Host, subprocess.Popen[bytes]]]:  # fmt: skip
    """A stand-in host on a loopback port and the worker stand-in connected to it; the stream
    ends (and the worker exits, writing `report`) when the block ends."""
    protos = rpc.load()
    host = Host(protos)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    protos.add_FunctionRpcServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    argv = [str(rpc.worker_python()), "-m", "tests.worker.proxy", "--host", "127.0.0.1", "--port", str(port),
            "--worker-id", "w-1", "--request-id", "r-1", "--protos", str(rpc.protos_dir())]  # fmt: skip
    if report is not None:
        argv += ["--report", str(report)]
    if memory_publisher:
        argv.append("--memory-publisher")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    worker = subprocess.Popen(argv, cwd=REPO, env={**clean, **env})
    try:
        yield host, worker
    finally:
        host.stop()
        try:
            worker.wait(timeout)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        server.stop(0)
