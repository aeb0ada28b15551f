"""V2 over gRPC: `inference.GRPCInferenceService` on grpc.aio, in the process of the warm sessions.

It runs as a background job of the core (`shared/adapters/oip/jobs.py`), on the core's event loop,
so a gRPC request joins the same micro-batches as an HTTP one. Methods are registered by
path (`/inference.GRPCInferenceService/ModelInfer`...) over the messages generated from
`proto/grpc_predict_v2.proto`. Tensors come as typed `contents` or as `raw_input_contents`;
the answer uses the form the request used. An error is the status its class names
(`ScoringError.grpc_status`: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE...) with its detail, and its
code in the `x-error-code` trailing metadata. The same server carries payment events
(`fraud.scoring.v1.Scoring`, shared/adapters/scoring_grpc) under the same keys and caps.

The port is outside the Functions host (no host key guards it), so the server guards itself:
every call carries one of GRPC_KEYS in its `x-api-key` metadata (compared in constant time),
else UNAUTHENTICATED; with no keys set, only a server on loopback answers (elsewhere every
call is refused, and the start logs why). The key is checked by a server interceptor from the
call's metadata, before its request message is read: a call without a key is answered at once
and holds no slot while its message is awaited (grpc.aio runs interceptors before its
concurrency check and, for a unary handler, before it reads the message; the refusal is a
stream-unary handler, which reads nothing). At most GRPC_MAX_CONCURRENT calls run at once (grpc
answers the next RESOURCE_EXHAUSTED); one connection opens at most a quarter of them (HTTP/2
SETTINGS_MAX_CONCURRENT_STREAMS), and a call whose request message has not arrived within
BODY_TIMEOUT_MS is answered DEADLINE_EXCEEDED (`body_timeout`), so keyed callers that stall
release their slots too. A connection lives about GRPC_MAX_CONNECTION_AGE_MS, then is asked to
go (GOAWAY; its calls have GRPC_MAX_CONNECTION_AGE_GRACE_MS to finish) and its client reconnects:
the port is balanced by connection, so a long-lived caller would otherwise never reach the replicas
a scale-out adds. A message is at most a V2 REST body's cap each way, and an inference
takes its admission slot before its tensors are decoded, having been checked against the
model's input from its head alone.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import numpy as np
from google.protobuf.message import Message

from shared.adapters.answered import log_answered
from shared.adapters.oip import codec
from shared.adapters.oip import grpc_predict_v2_pb2 as pb
from shared.adapters.oip.dataplane import Check, DataPlane, InferRequest, InferResponse, NamedTensor
from shared.errors import BadRequest, BodyTimeout, ScoringError

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = [
    "ERROR_CODE",
    "KEY_METADATA",
    "SERVICE",
    "KeyInterceptor",
    "guarded",
    "handler",
    "serve_grpc",
    "streams_per_connection",
]

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
KEY_METADATA = "x-api-key"
ERROR_CODE = "x-error-code"  # trailing metadata of an error: its code, as HTTP answers it (`invalid_event`...)
LOOPBACK = ("127.0.0.1", "::1", "localhost")
M = TypeVar("M", bound=Message)
Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]

# V2 datatype -> the typed `contents` field that carries it (FP16 travels raw only)
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


async def serve_grpc(service: ScoringService, host: str, port: int, *, grace_s: float = 1.0) -> None:
    """Serve until cancelled (the core's background job), then stop within `grace_s`."""
    limits = service.limits
    keys: tuple[bytes, ...] | None = _keys(limits.grpc_keys)
    if not keys and host in LOOPBACK:
        keys = None  # no key on loopback (`make run`, tests): nothing else can reach the port
    elif not keys:
        log.error("GRPC_KEYS is not set: every gRPC call on %s:%d is refused (UNAUTHENTICATED)", host, port)
    cap = limits.max_body_bytes * 16
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", cap),
            ("grpc.max_send_message_length", cap),
            ("grpc.max_concurrent_streams", streams_per_connection(limits.grpc_max_concurrent)),
            # NOTE: the port is balanced by TCP connection (a Container Apps additional port): an aged
            # connection is told to go (GOAWAY, gRFC A9), so its client reconnects, onto any replica
            ("grpc.max_connection_age_ms", limits.grpc_connection_age_ms),
            ("grpc.max_connection_age_grace_ms", limits.grpc_connection_age_grace_ms),
            ("grpc.so_reuseport", 0),
        ],
        interceptors=[KeyInterceptor(keys)],
        maximum_concurrent_rpcs=limits.grpc_max_concurrent,
    )
    from shared.adapters.scoring_grpc.service import handler as events_handler  # NOTE: it imports `guarded`

    wait_s = limits.body_timeout_s
    server.add_generic_rpc_handlers((handler(DataPlane(service), wait_s), events_handler(service, wait_s)))
    if server.add_insecure_port(f"{host}:{port}") == 0:
        raise OSError(f"GRPC_PORT {port}: cannot bind {host}:{port}")
    await server.start()
    log.info("V2 gRPC serving on %s:%d, with fraud.scoring.v1 (payment events)", host, port)
    try:
        await server.wait_for_termination()
    finally:
        await server.stop(grace_s)


def _keys(setting: str | None) -> tuple[bytes, ...]:
    return tuple(k.strip().encode() for k in setting.split(",")) if setting else ()


def streams_per_connection(max_concurrent: int) -> int:
    """A quarter of the server's calls per HTTP/2 connection (at least one): one connection alone
    cannot hold every slot."""
    return max(1, max_concurrent // 4)


async def _refuse(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> Message:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"a valid key in `{KEY_METADATA}` metadata")
    raise AssertionError("unreachable: abort raises")


# NOTE: stream-unary: grpc.aio reads a unary handler's request message before calling it; this reads none
_REFUSED = grpc.stream_unary_rpc_method_handler(_refuse, response_serializer=lambda m: m.SerializeToString())


class KeyInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc,unused-ignore]  # NOTE: untyped in grpc-stubs
    """Refuses a call without one of `keys` from its metadata alone (`keys` None: no key asked)."""

    def __init__(self, keys: tuple[bytes, ...] | None) -> None:
        self._keys = keys

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if self._keys is None or _carries_key(handler_call_details.invocation_metadata, self._keys):
            return await continuation(handler_call_details)
        log.warning("gRPC %s refused: no valid %s metadata", handler_call_details.method, KEY_METADATA)
        return _REFUSED


def handler(plane: DataPlane, request_wait_s: float = 5.0) -> grpc.GenericRpcHandler[Any, Any]:
    """The service's methods over `plane` (the key is the interceptor's); a call whose request
    message has not arrived within `request_wait_s` is answered DEADLINE_EXCEEDED."""

    async def server_live(request: pb.ServerLiveRequest, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=plane.ready())

    async def model_ready(request: pb.ModelReadyRequest, context: Any) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=plane.model_ready(request.name, request.version or None))

    async def server_metadata(request: pb.ServerMetadataRequest, context: Any) -> pb.ServerMetadataResponse:
        meta = plane.server_metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version)

    async def model_metadata(request: pb.ModelMetadataRequest, context: Any) -> pb.ModelMetadataResponse:
        info = plane.model_metadata(request.name, request.version or None)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=info.name,
            versions=info.versions,
            platform=info.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in info.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in info.outputs],
        )

    async def model_infer(request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
        response = await plane.infer(request.model_name, request.model_version or None, partial(decode_infer, request))
        return encode_infer(response, raw=bool(request.raw_input_contents))

    methods: dict[str, tuple[Behavior, type[Message]]] = {
        "ServerLive": (server_live, pb.ServerLiveRequest),
        "ServerReady": (server_ready, pb.ServerReadyRequest),
        "ModelReady": (model_ready, pb.ModelReadyRequest),
        "ServerMetadata": (server_metadata, pb.ServerMetadataRequest),
        "ModelMetadata": (model_metadata, pb.ModelMetadataRequest),
        "ModelInfer": (model_infer, pb.ModelInferRequest),
    }
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            # NOTE: stream-unary on the server, unary on the wire: the handler awaits the message itself, bounded
            name: grpc.stream_unary_rpc_method_handler(
                guarded(name, behavior, request_wait_s),
                request_deserializer=message.FromString,
                response_serializer=lambda m: m.SerializeToString(),
            )
            for name, (behavior, message) in methods.items()
        },
    )


async def refuse(context: grpc.aio.ServicerContext[Any, Any], exc: ScoringError, method: str) -> None:
    """End the call with `exc`: its status and detail, its code (HTTP's) in the `x-error-code` trailing
    metadata, logged as an answered refusal. Raises (grpc.aio's abort)."""
    log_answered(exc, "grpc", method=method)
    await context.abort(grpc.StatusCode[exc.grpc_status], exc.detail, ((ERROR_CODE, exc.code),))


def guarded(name: str, behavior: Behavior, request_wait_s: float) -> Callable[..., Awaitable[Message]]:
    """The call's one request message, awaited for at most `request_wait_s` (else `BodyTimeout`);
    our errors become their gRPC status and detail, with their code (HTTP's) in the `x-error-code`
    trailing metadata; anything else is INTERNAL, logged once."""

    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        try:
            request = await _first(requests, request_wait_s)
            return await behavior(request, context)
        except ScoringError as exc:
            await refuse(context, exc, name)
        except Exception:
            log.exception("gRPC %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error", ((ERROR_CODE, "internal"),))
        raise AssertionError("unreachable: abort raises")

    return call


async def _first(requests: AsyncIterator[Any], wait_s: float) -> Any:
    try:
        async with asyncio.timeout(wait_s):
            async for request in requests:
                return request
    except TimeoutError:
        raise BodyTimeout(f"no request message within BODY_TIMEOUT_MS ({wait_s * 1000:.0f} ms)") from None
    raise BadRequest("the call ended without a request message")


def _carries_key(metadata: Sequence[tuple[str, str | bytes]] | None, keys: tuple[bytes, ...]) -> bool:
    """Whether the call's `x-api-key` is one of `keys`: each compared in constant time, all of them."""
    sent = [v for k, v in metadata or () if k == KEY_METADATA]
    if len(sent) != 1:
        return False
    given = sent[0].encode() if isinstance(sent[0], str) else bytes(sent[0])
    return any([hmac.compare_digest(given, key) for key in keys])  # NOTE: a list: every key is compared


def decode_infer(request: pb.ModelInferRequest, check: Check | None = None) -> InferRequest:
    """The transport-free request; `raw_input_contents` (one entry per input) or typed contents.
    `check(name, datatype, shape)` refuses an input before its data is decoded."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise BadRequest(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs")
    inputs = []
    for i, tensor in enumerate(request.inputs):
        shape = tuple(tensor.shape)
        if check is not None:
            check(tensor.name, tensor.datatype, shape)
        if raw:
            data = codec.from_raw(tensor.datatype, shape, raw[i])
        else:
            data = _from_contents(tensor.datatype, shape, tensor.contents)
        inputs.append(NamedTensor(tensor.name, tensor.datatype, shape, data))
    outputs = [o.name for o in request.outputs] or None
    return InferRequest(request.model_name, request.model_version or None, inputs, outputs, request.id)


def _from_contents(datatype: str, shape: tuple[int, ...], contents: pb.InferTensorContents) -> codec.Tensor:
    field = _CONTENTS.get(datatype)
    if field is None:
        if datatype in codec.DTYPES:
            raise BadRequest(f"{datatype} travels in raw_input_contents only")
        raise BadRequest(f"unknown datatype {datatype!r}")
    values = list(getattr(contents, field))
    count = codec.element_count(shape)
    if len(values) != count:
        raise BadRequest(f"{field} has {len(values)} elements, shape {list(shape)} needs {count}")
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = values
        return array.reshape(shape)
    try:
        return np.array(values, dtype=codec.DTYPES[datatype]).reshape(shape)
    except OverflowError as exc:
        raise BadRequest(f"{datatype} contents out of range") from exc


def encode_infer(response: InferResponse, *, raw: bool) -> pb.ModelInferResponse:
    out = pb.ModelInferResponse(model_name=response.model, model_version=response.version, id=response.id)
    for tensor in response.outputs:
        entry = out.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if raw:
            out.raw_output_contents.append(codec.to_raw(tensor.data))
        else:
            getattr(entry.contents, _CONTENTS[tensor.datatype]).extend(codec.to_json(tensor.data))
    return out
