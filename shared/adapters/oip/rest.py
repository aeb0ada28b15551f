"""V2 over HTTP: the `/v2/...` routes of the Starlette app (locally and under the Functions host).

    GET  /v2                                        server metadata
    GET  /v2/health/live | /v2/health/ready         200, or 400 when not ready (the protocol's 4xx)
    GET  /v2/models/{name}[/versions/{version}]     model metadata
    GET  /v2/models/{name}[/versions/{version}]/ready
    POST /v2/models/{name}[/versions/{version}]/infer

A request body is JSON, or JSON then binary tensors (the binary-data extension that
tritonclient uses by default: `Inference-Header-Content-Length` says where the JSON ends, and
each binary input states its `binary_data_size`). An output is sent binary when asked for
(`parameters.binary_data` on it, or `binary_data_output` on the request). Errors are
`{"error": "<message>"}` with the status of the error's class (a 4xx for the caller's own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from shared.adapters.answered import log_answered
from shared.domain.answers import BinaryData, V2Error, V2InferHead, V2Live, V2ModelReady, V2Output, V2Ready, encode
from shared.errors import BadRequest, MalformedJson, ModelNotFound, ScoringError, retry_after

if TYPE_CHECKING:
    from shared.adapters.oip.dataplane import Check, DataPlane, InferRequest, InferResponse
    from shared.core.service import ScoringService

__all__ = ["HEADER_LENGTH", "V2Endpoints"]

HEADER_LENGTH = "inference-header-content-length"
Endpoint = Callable[[Request], Awaitable[Response]]


def _json(body: object, status: int = 200) -> Response:
    return Response(encode(body), status_code=status, media_type="application/json")


class V2Endpoints:
    """The V2 endpoints over the core that `service()` gives (built on first use); `read_body`
    reads a request's body within the app's size and time limits. Each is named as its route
    in the route table (shared/adapters/http/routes.py): `endpoint(name)`."""

    def __init__(
        self, service: Callable[[], Awaitable[ScoringService]], read_body: Callable[[Request], Awaitable[bytes]]
    ) -> None:
        self.service, self.read_body = service, read_body
        self._plane: DataPlane | None = None

    def endpoint(self, name: str) -> Endpoint:
        """The route `name`'s endpoint, answering errors in the protocol's shape."""
        return _v2(getattr(self, _METHODS[name]))

    async def plane(self) -> DataPlane:
        core = await self.service()
        if self._plane is None or self._plane.core is not core:
            from shared.adapters.oip.dataplane import DataPlane  # NOTE: numpy: off the Functions import path

            self._plane = DataPlane(core)
        return self._plane

    async def server(self, request: Request) -> Response:
        return _json((await self.plane()).server_metadata())

    async def health(self, request: Request) -> Response:
        if request.path_params["probe"] == "live":
            return _json(V2Live(True))
        if request.path_params["probe"] != "ready":
            raise ModelNotFound(f"no such path {request.url.path}")
        try:
            ready = (await self.plane()).ready()
        except ScoringError as exc:  # no core (none loads, a bad setting): the protocol's false is a 4xx, not a 503
            if exc.status != 503:
                raise
            ready = False
        return _json(V2Ready(ready), 200 if ready else 400)

    async def metadata(self, request: Request) -> Response:
        return _json(
            (await self.plane()).model_metadata(request.path_params["name"], request.path_params.get("version"))
        )

    async def model_ready(self, request: Request) -> Response:
        ready = (await self.plane()).model_ready(request.path_params["name"], request.path_params.get("version"))
        return _json(V2ModelReady(request.path_params["name"], ready), 200 if ready else 400)

    async def infer(self, request: Request) -> Response:
        plane = await self.plane()
        body = await self.read_body(request)  # bounded by the body cap and BODY_TIMEOUT_MS
        name, version = request.path_params["name"], request.path_params.get("version")
        return encode_infer(await plane.infer(name, version, partial(decode_infer, request, body)))


_METHODS = {
    "v2_server": "server",
    "v2_health": "health",
    "v2_model": "metadata",
    "v2_version": "metadata",
    "v2_model_ready": "model_ready",
    "v2_version_ready": "model_ready",
    "v2_model_infer": "infer",
    "v2_version_infer": "infer",
}


def _v2(endpoint: Endpoint) -> Endpoint:
    """Errors in the protocol's shape: `{"error": message}` (not the /api shape), logged by the one policy."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ScoringError as exc:
            log_answered(exc, "v2", route=str(getattr(request.scope.get("route"), "path", "")).rstrip("/"))
            response = _json(V2Error(exc.detail), exc.status)
            if (wait := retry_after(exc)) is not None:  # overloaded or past its deadline
                response.headers["retry-after"] = wait
            return response

    return guarded


def decode_infer(request: Request, body: bytes, check: Check | None = None) -> InferRequest:
    """The request (and whether its outputs are to be sent binary); `check(name, datatype, shape)`
    refuses an input before its data is decoded."""
    from shared.adapters.oip import codec
    from shared.adapters.oip.dataplane import InferRequest, NamedTensor

    header = request.headers.get(HEADER_LENGTH)
    split = _header_length(header, len(body)) if header is not None else len(body)
    try:
        raw = orjson.loads(body[:split])
    except orjson.JSONDecodeError as exc:
        raise MalformedJson(f"the inference request is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("inputs"), list):
        raise BadRequest("an inference request is a JSON object with an `inputs` list")
    binary, offset = body, split
    inputs = []
    for item in raw["inputs"]:
        name, datatype, shape, params = _tensor_head(item)
        if check is not None:
            check(name, datatype, tuple(shape))
        size = params.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise BadRequest(f"input {name!r}: binary_data_size {size!r} does not fit the body")
            data = codec.from_raw(datatype, shape, binary[offset : offset + size])
            offset += size
        else:
            data = codec.from_json(datatype, shape, item.get("data"))
        inputs.append(NamedTensor(name, datatype, tuple(shape), data))
    if offset != len(binary):
        raise BadRequest(f"{len(binary) - offset} bytes after the last binary input")
    parameters = _params(raw.get("parameters"))
    outputs, binary_out = None, bool(parameters.get("binary_data_output", False))
    if raw.get("outputs") is not None:
        if not isinstance(raw["outputs"], list) or not all(isinstance(o, dict) for o in raw["outputs"]):
            raise BadRequest("`outputs` must be a list of objects")
        outputs = [str(o.get("name")) for o in raw["outputs"]]
        binary_out = binary_out or any(_params(o.get("parameters")).get("binary_data", False) for o in raw["outputs"])
    request_id = raw.get("id", "")
    if not isinstance(request_id, str):
        raise BadRequest("`id` must be a string")
    model, version = request.path_params["name"], request.path_params.get("version")
    return InferRequest(model, version, inputs, outputs, request_id, parameters, binary_out)


def _header_length(header: str, size: int) -> int:
    if not (header.isascii() and header.isdigit()) or int(header) > size:  # NOTE: "²".isdigit(), int("²") fails
        raise BadRequest(f"Inference-Header-Content-Length {header[:20]!r} does not fit a {size}-byte body")
    return int(header)


def _tensor_head(item: Any) -> tuple[str, str, list[int], dict[str, Any]]:
    if not isinstance(item, dict):
        raise BadRequest("each input is an object with name, shape, datatype and data")
    name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
    if not isinstance(name, str) or not isinstance(datatype, str) or not isinstance(shape, list):
        raise BadRequest("each input needs a string name, a string datatype and a shape list")
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise BadRequest(f"input {name!r}: shape must be integers")
    return name, datatype, shape, _params(item.get("parameters"))


def _params(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest("`parameters` must be an object")
    return raw


def encode_infer(response: InferResponse) -> Response:
    from shared.adapters.oip import codec

    binary = response.binary
    outputs: list[V2Output] = []
    blobs: list[bytes] = []
    for tensor in response.outputs:
        if binary:
            blob = codec.to_raw(tensor.data)
            blobs.append(blob)
            outputs.append(V2Output(tensor.name, tensor.datatype, list(tensor.shape), parameters=BinaryData(len(blob))))
        else:
            outputs.append(V2Output(tensor.name, tensor.datatype, list(tensor.shape), data=codec.to_json(tensor.data)))
    encoded = encode(V2InferHead(response.model, response.version, outputs, response.id))
    if not binary:
        return Response(encoded, media_type="application/json")
    return Response(
        encoded + b"".join(blobs),
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(len(encoded))},
    )
