"""A stand-in for the Functions host's side of the worker protocol (FunctionRpc.EventStream).

It serves the host's gRPC service on a loopback port, starts the worker stand-in
(tests/worker/proxy.py) in the conformance venv, and drives it as the host does: StartStream,
WorkerInitRequest (the worker indexes the app), FunctionsMetadataRequest, one
FunctionLoadRequest per function, then InvocationRequests built as the host builds them (an
HTTP trigger's RpcHttp; a Service Bus batch as collection data plus `...Array` trigger
metadata; a blob's bytes with its `BlobTrigger` path and `Properties`).

HTTP streams (HttpV2): a worker that answers init with an `HttpUri` capability runs its own web
server, and the host forwards each HTTP trigger's request to it (`Host.forward_async`, `Forwarder`),
as Azure/azure-functions-host does at commit 89dc438d476542786f2fc4070f553423213a6223 (cited
per step below, paths under src/WebJobs.Script.Grpc/). `Host.call` takes that door by itself when
the worker advertised it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import queue
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tests.worker import rpc

__all__ = ["Answer", "Forwarded", "Forwarder", "Host", "running_worker"]

REPO = rpc.REPO
STOP = object()
HTTP_URI = "HttpUri"  # RpcWorkerConstants.HttpUri: the worker's web server, in its init capabilities
REQUIRES_ROUTE_PARAMETERS = "RequiresRouteParameters"
INVOCATION_ID_HEADER = "x-ms-invocation-id"  # ScriptConstants.HttpProxyCorrelationHeader, what the worker pairs on


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
    forwarder: Forwarder | None = None  # HTTP streams: set by `start` when the worker advertises `HttpUri`
    route_parameters: bool = False  # the worker asked for route parameters in the InvocationRequest

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
        # NOTE: GrpcWorkerChannel.cs:576-585 (UpdateCapabilities): an `HttpUri` capability makes the
        # channel an HTTP-proxying one; every HTTP trigger's request then goes to that address.
        if init.capabilities.get(HTTP_URI):
            self.forwarder = Forwarder(init.capabilities[HTTP_URI])
            self.route_parameters = bool(init.capabilities.get(REQUIRES_ROUTE_PARAMETERS))
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
        if self.forwarder is not None:  # HTTP streams: the answer comes from the worker's server
            return self.forward(function, method, path, body, **kw)
        response = self.invoke(function, self.http(function, method, path, body, **kw))
        return self.answer(response)

    # -- HTTP streams (HttpV2) ------------------------------------------------------------

    def forward_async(self, function: str, method: str, path: str, body: bytes = b"", *,
                      params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None) -> concurrent.futures.Future[Forwarded]:  # fmt: skip
        """One HTTP trigger invocation of an HTTP-proxying worker: the request to its server and
        the InvocationRequest over the stream; done when both have answered (`Forwarded`).

        `params`: the route parameters (the path already carries them)."""
        if self.forwarder is None:
            raise RuntimeError("the worker advertised no HttpUri: use `call` / `invoke`")
        p = self.protos
        invocation_id = str(uuid.uuid4())
        invoked: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.lock:
            self.pending[invocation_id] = invoked
        # NOTE: GrpcMessageConversionExtensions.cs:103-126 (ToRpcHttp): when proxying, the RpcHttp is
        # empty but for the route parameters (if the worker requires them): no method, url, headers or body.
        rpc_http = p.RpcHttp(params=(params or {}) if self.route_parameters else {})
        # NOTE: ScriptInvocationContextExtensions.cs:24-145: the binding keeps its parameter's name;
        # the HttpRequest's binding data is left out (the worker declares RpcHttpTriggerMetadataRemoved).
        binding = p.ParameterBinding(name=self._trigger_name(function), data=p.TypedData(http=rpc_http))
        request = p.InvocationRequest(
            invocation_id=invocation_id, function_id=self.functions[function].function_id, input_data=[binding]
        )
        # NOTE: GrpcWorkerChannel.cs:894-900: forwarding starts before the InvocationRequest is sent.
        head = {"content-type": "application/json", "x-functions-key": "k", **(headers or {})}
        answered = self.forwarder.send(invocation_id, method, path, head, body)
        self.outbox.put(p.StreamingMessage(request_id=str(uuid.uuid4()), invocation_request=request))
        paired: concurrent.futures.Future[Forwarded] = concurrent.futures.Future()

        # NOTE: GrpcWorkerChannel.cs:1114-1117 (InvokeResponse): the forwarding is awaited first
        # (EnsureSuccessfulForwardingAsync: a forwarding error fails the invocation), then the result.
        def pair(http: concurrent.futures.Future[Answer], response: concurrent.futures.Future[Any]) -> None:
            if (error := http.exception()) is not None:
                paired.set_exception(error)
            else:
                paired.set_result(Forwarded(response.result(), http.result()))

        answered.add_done_callback(lambda http: invoked.add_done_callback(lambda response: pair(http, response)))
        return paired

    def forward(self, function: str, method: str, path: str, body: bytes = b"", timeout: float = 60,
                **kw: Any) -> Answer:  # fmt: skip
        """`forward_async`'s HTTP answer, after checking the invocation succeeded."""
        forwarded = self.forward_async(function, method, path, body, **kw).result(timeout)
        if forwarded.result.status != self.protos.StatusResult.Success:
            raise AssertionError(f"the invocation failed: {forwarded.result.exception.message}")
        return forwarded.answer

    def _trigger_name(self, function: str) -> str:
        """The HTTP trigger's parameter name, from the function's metadata (the host's binding name)."""
        for name, binding in self.functions[function].bindings.items():
            if binding.type == "httpTrigger":
                return str(name)
        raise ValueError(f"{function} has no HTTP trigger")

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
        if self.forwarder is not None:
            self.forwarder.close()


@dataclass
class Forwarded:
    """An HTTP streams invocation: the worker's InvocationResponse and the answer its server sent."""

    response: Any  # InvocationResponse (its return value is empty: the answer went over HTTP)
    answer: Answer

    @property
    def result(self) -> Any:
        """The invocation's StatusResult, as on an InvocationResponse."""
        return self.response.result


class Forwarder:
    """The host's HTTP proxy to one worker's server (Server/DefaultHttpProxyService.cs:24-92).

    The host forwards the whole request with YARP's IHttpForwarder: the method, the request's
    path and query after the worker's `HttpUri`, its headers, its body, and one header added,
    `x-ms-invocation-id` (StartForwarding, :69-92). Its SocketsHttpHandler keeps connections
    open between requests (HTTP/1.1 here: the URI is plain http); Server/RetryProxyHandler.cs
    retries a request that could not be sent, up to 10 times, 50 ms doubling to 250 ms.
    Here: a thread per request in flight, each with its own kept-open connection (HTTP/1.1).
    """

    RETRIES, FIRST_DELAY_S, MAX_DELAY_S = 10, 0.05, 0.25

    def __init__(self, uri: str, in_flight: int = 32) -> None:
        parts = urllib.parse.urlsplit(uri)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"not an http://host:port address: {uri!r}")
        self.address = (parts.hostname, parts.port)
        self.prefix = parts.path.rstrip("/")
        self.pool = concurrent.futures.ThreadPoolExecutor(in_flight, thread_name_prefix="forward")
        self.local = threading.local()

    def send(self, invocation_id: str, method: str, path: str, headers: dict[str, str],
             body: bytes) -> concurrent.futures.Future[Answer]:  # fmt: skip
        head = {**headers, INVOCATION_ID_HEADER: invocation_id}
        return self.pool.submit(self._send, method, self.prefix + path, head, body)

    def _send(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        delay = self.FIRST_DELAY_S
        for attempt in range(1, self.RETRIES + 1):
            try:
                return self._exchange(self._connection(), method, path, headers, body)
            except (ConnectionError, TimeoutError, ValueError):
                self._drop()
                if attempt == self.RETRIES:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, self.MAX_DELAY_S)
        raise AssertionError("unreachable")

    def _exchange(self, sock: socket.socket, method: str, path: str, headers: dict[str, str],
                  body: bytes) -> Answer:  # fmt: skip
        """One HTTP/1.1 request and its answer on a kept-open connection (a few lines of framing:
        the stand-in host's own cost stays small beside the worker's)."""
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.address[0]}:{self.address[1]}",
                 f"content-length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = self._read(sock, lambda got: b"\r\n\r\n" in got)
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *fields = head.decode("latin-1").split("\r\n")
        answer_headers = {k.strip().lower(): v.strip() for k, v in (f.split(":", 1) for f in fields)}
        if "content-length" not in answer_headers:
            raise ValueError(f"an answer without content-length: {status_line}")
        size = int(answer_headers["content-length"])
        rest = self._read(sock, lambda got: len(got) >= size, rest)
        return Answer(int(status_line.split(" ", 2)[1]), answer_headers, rest[:size])

    @staticmethod
    def _read(sock: socket.socket, enough: Callable[[bytes], bool], data: bytes = b"") -> bytes:
        while not enough(data):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("the worker's server closed the connection")
            data += chunk
        return data

    def _connection(self) -> socket.socket:
        sock = getattr(self.local, "connection", None)
        if sock is None:
            sock = socket.create_connection(self.address, timeout=60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.local.connection = sock
        return sock

    def _drop(self) -> None:
        sock = getattr(self.local, "connection", None)
        if sock is not None:
            sock.close()
        self.local.connection = None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


@contextlib.contextmanager
def running_worker(env: dict[str, str], *, report: Path | None = None, memory_publisher: bool = True,
                   timeout: float = 60, under: Sequence[str] = ()) -> Iterator[tuple[Host, subprocess.Popen[bytes]]]:  # fmt: skip
    """A stand-in host on a loopback port and the worker stand-in connected to it; the stream
    ends (and the worker exits, writing `report`) when the block ends. `under`: a command prefix
    for the worker (valgrind, for bench/worker_instructions.py)."""
    protos = rpc.load()
    host = Host(protos)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    protos.add_FunctionRpcServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    argv = [*under, str(rpc.worker_python()), "-m", "tests.worker.proxy", "--host", "127.0.0.1", "--port", str(port),
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
