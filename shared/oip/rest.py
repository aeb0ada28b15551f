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

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shared.answers import BinaryData, V2Error, V2InferHead, V2Live, V2ModelReady, V2Output, V2Ready, encode
from shared.errors import BadRequest, MalformedJson, ModelNotFound, ScoringError, retry_after

if TYPE_CHECKING:
    from shared.oip.dataplane import DataPlane, InferRequest, InferResponse
    from shared.service import ScoringService

__all__ = ["HEADER_LENGTH", "v2_routes"]

log = logging.getLogger(__name__)

HEADER_LENGTH = "inference-header-content-length"
Endpoint = Callable[[Request], Awaitable[Response]]


def _json(body: object, status: int = 200) -> Response:
    return Response(encode(body), status_code=status, media_type="application/json")


def v2_routes(
    service: Callable[[], Awaitable[ScoringService]], read_body: Callable[[Request], Awaitable[bytes]]
) -> list[Route]:
    """The V2 routes over the core that `service()` gives (built on first use); `read_body`
    reads a request's body within the app's size and time limits. The two infer routes first."""
    current: dict[str, DataPlane] = {}

    async def plane() -> DataPlane:
        core = await service()
        found = current.get("plane")
        if found is None or found.core is not core:
            from shared.oip.dataplane import DataPlane  # NOTE: numpy: off the Functions import path

            found = current["plane"] = DataPlane(core)
        return found

    async def server(request: Request) -> Response:
        return _json((await plane()).server_metadata())

    async def health(request: Request) -> Response:
        if request.path_params["probe"] == "live":
            return _json(V2Live(True))
        if request.path_params["probe"] != "ready":
            raise ModelNotFound(f"no such path {request.url.path}")
        ready = (await plane()).ready()
        return _json(V2Ready(ready), 200 if ready else 400)

    async def metadata(request: Request) -> Response:
        return _json((await plane()).model_metadata(request.path_params["name"], request.path_params.get("version")))

    async def model_ready(request: Request) -> Response:
        ready = (await plane()).model_ready(request.path_params["name"], request.path_params.get("version"))
        return _json(V2ModelReady(request.path_params["name"], ready), 200 if ready else 400)

    async def infer(request: Request) -> Response:
        body = await read_body(request)
        decoded, binary_out = decode_infer(request, body)
        return encode_infer(await (await plane()).infer(decoded), binary_out)

    model = "/v2/models/{name}"
    versioned = model + "/versions/{version}"
    return [
        Route(model + "/infer", _v2(infer), methods=["POST"]),
        Route(versioned + "/infer", _v2(infer), methods=["POST"]),
        Route("/v2", _v2(server), methods=["GET"]),
        Route("/v2/health/{probe}", _v2(health), methods=["GET"]),
        Route(model, _v2(metadata), methods=["GET"]),
        Route(versioned, _v2(metadata), methods=["GET"]),
        Route(model + "/ready", _v2(model_ready), methods=["GET"]),
        Route(versioned + "/ready", _v2(model_ready), methods=["GET"]),
    ]


def _v2(endpoint: Endpoint) -> Endpoint:
    """Errors in the protocol's shape: `{"error": message}` (not the /api shape)."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ScoringError as exc:
            if exc.status >= 500:
                log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.status, exc.detail)
            response = _json(V2Error(exc.detail), exc.status)
            if (wait := retry_after(exc)) is not None:  # NOTE: overloaded or past its deadline
                response.headers["retry-after"] = wait
            return response

    return guarded


def decode_infer(request: Request, body: bytes) -> tuple[InferRequest, bool]:
    """The request, and whether its outputs are to be sent binary."""
    from shared.oip import codec
    from shared.oip.dataplane import InferRequest, InputTensor

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
        size = params.get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise BadRequest(f"input {name!r}: binary_data_size {size!r} does not fit the body")
            data = codec.from_raw(datatype, shape, binary[offset : offset + size])
            offset += size
        else:
            data = codec.from_json(datatype, shape, item.get("data"))
        inputs.append(InputTensor(name, datatype, tuple(shape), data))
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
    decoded = InferRequest(
        request.path_params["name"], request.path_params.get("version"), inputs, outputs, request_id, parameters
    )
    return decoded, binary_out


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


def encode_infer(response: InferResponse, binary: bool) -> Response:
    from shared.oip import codec

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
