"""Properties of the V2 request decoding: tensors from JSON and binary, and whole REST bodies
(JSON, and the binary-data extension). Any input is a decoded request or a 4xx `BadRequest`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from starlette.requests import Request
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.adapters.oip import codec
from shared.adapters.oip.dataplane import InferRequest
from shared.adapters.oip.rest import HEADER_LENGTH, decode_infer
from shared.core.holder import ServiceHolder
from shared.errors import BadRequest
from shared.settings import Settings
from tests.strategies import corrupted, json_values

DATATYPES = list(codec.DTYPES)
datatypes = st.sampled_from(DATATYPES) | st.text(max_size=6)
dims = st.integers(0, 4) | st.integers(-3, 2**70)
shapes = st.lists(dims, max_size=10) | st.lists(st.integers(0, 4), max_size=4)


def refused(exc: BadRequest) -> None:
    assert 400 <= exc.status < 500 and exc.detail


@st.composite
def tensors(draw: st.DrawFn, datatype: str | None = None) -> tuple[str, np.ndarray]:
    """A datatype and an array of it (BYTES: UTF-8 text, as JSON carries it)."""
    name = datatype or draw(st.sampled_from(DATATYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    if name == "BYTES":
        items = draw(st.lists(st.text(max_size=8), min_size=math.prod(shape), max_size=math.prod(shape)))
        array = np.empty(len(items), dtype=object)
        array[:] = [s.encode("utf-8", "surrogatepass") for s in items]
        assume(all(_utf8(b) for b in array))
        return name, array.reshape(shape)
    return name, draw(hnp.arrays(codec.DTYPES[name], shape))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json_can_carry(array: np.ndarray) -> bool:
    """JSON has no NaN or infinity: such tensors travel binary."""
    return array.dtype.kind != "f" or bool(np.isfinite(array).all())


def nest(flat: list[Any], shape: tuple[int, ...]) -> Any:
    """`flat` as nested lists of `shape` (row-major)."""
    if len(shape) <= 1:
        return flat
    step = math.prod(shape[1:])
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


# -- tensors ----------------------------------------------------------------------------


@given(datatypes, shapes, json_values)
@example("FP32", [2, 2], [[1, 2, 3], [4]])  # ragged: right count, wrong rows
@example("FP32", [1, 3], [[1, 2], [3]])
@example("FP32", [2], [[1], [2]])
@example("FP16", [1], [1e5])
@example("FP32", [1], [10**400])
@example("INT64", [1], [2**63])
@example("BOOL", [0, 2**70], [])
@example("FP32", [0, 2**24, 2**24, 2**24], [])  # regression: reshape raised ValueError ("array is too big")
def test_any_json_tensor_is_a_tensor_of_its_shape_or_a_4xx(datatype: str, shape: list[int], data: Any) -> None:
    try:
        tensor = codec.from_json(datatype, shape, data)
    except BadRequest as exc:
        refused(exc)
        return
    assert tensor.shape == tuple(shape) and tensor.dtype == codec.DTYPES[datatype]
    if isinstance(data, list) and data and isinstance(data[0], list):  # nested: it has the shape's rows
        assert len(data) == shape[0]


@given(datatypes, shapes, st.binary(max_size=300))
@example("BYTES", [1], b"\xff\xff\xff\xff")
@example("BOOL", [2], b"\x01\x02")
@example("BOOL", [0, 3, 4, 2905, 7102, 16384, 2273850], b"")  # regression, found by the long run: ValueError
def test_any_binary_tensor_is_a_tensor_of_its_shape_or_a_4xx(datatype: str, shape: list[int], raw: bytes) -> None:
    try:
        tensor = codec.from_raw(datatype, shape, raw)
    except BadRequest as exc:
        refused(exc)
        return
    assert tensor.shape == tuple(shape) and tensor.dtype == codec.DTYPES[datatype]
    assert codec.to_raw(tensor) == raw


@given(tensors(), st.booleans())
def test_every_tensor_round_trips_through_json_and_binary(tensor: tuple[str, np.ndarray], nested: bool) -> None:
    datatype, array = tensor
    shape = list(array.shape)
    raw = codec.to_raw(array)
    assert codec.to_raw(codec.from_raw(datatype, shape, raw)) == raw
    data = json.loads(json.dumps(codec.to_json(array)))  # NaN and inf as Python's json writes them
    again = codec.from_json(datatype, shape, nest(data, array.shape) if nested else data)
    assert again.shape == array.shape and codec.datatype_of(again) == datatype
    np.testing.assert_array_equal(again, array)


@given(tensors(), st.data())
def test_corrupt_binary_of_a_valid_tensor_is_a_tensor_or_a_4xx(
    tensor: tuple[str, np.ndarray], data: st.DataObject
) -> None:
    datatype, array = tensor
    broken = data.draw(corrupted(codec.to_raw(array)))
    try:
        codec.from_raw(datatype, list(array.shape), broken)
    except BadRequest as exc:
        refused(exc)


# -- whole REST bodies (rest.decode_infer) ----------------------------------------------


def post(headers: dict[str, bytes] | None = None) -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/fraud/infer",
        "headers": [(k.encode("latin-1"), v) for k, v in (headers or {}).items()],
        "path_params": {"name": "fraud"},
        "query_string": b"",
    }
    return Request(scope)


def decoded_or_refused(body: bytes, headers: dict[str, bytes] | None = None) -> InferRequest | BadRequest:
    try:
        decoded = decode_infer(post(headers), body)
    except BadRequest as exc:
        refused(exc)
        return exc
    assert isinstance(decoded.binary_outputs, bool)
    return decoded


tensor_heads = st.fixed_dictionaries(
    {"name": st.text(max_size=8) | json_values, "datatype": datatypes | json_values, "shape": shapes | json_values},
    optional={
        "data": json_values,
        "parameters": json_values | st.dictionaries(st.sampled_from(["binary_data_size"]), json_values),
    },
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "inputs": st.lists(tensor_heads, max_size=3) | json_values,
        "outputs": st.lists(st.dictionaries(st.sampled_from(["name", "parameters"]), json_values)) | json_values,
        "parameters": json_values,
        "id": json_values,
    },
)


@given(bodies | json_values, st.binary(max_size=64), st.none() | st.integers(-5, 400).map(str) | st.text(max_size=6))
def test_any_json_body_is_a_request_or_a_4xx(head: Any, tail: bytes, length: str | None) -> None:
    encoded = json.dumps(head).encode()
    headers = None if length is None else {HEADER_LENGTH: length.encode("utf-8")}
    decoded_or_refused(encoded + tail, headers)


@given(st.binary(max_size=500), st.none() | st.binary(max_size=4))
def test_any_bytes_are_a_request_or_a_4xx(body: bytes, length: bytes | None) -> None:
    decoded_or_refused(body, None if length is None else {HEADER_LENGTH: length})


def test_a_non_ascii_digit_in_the_header_length_is_a_4xx() -> None:
    """'²'.isdigit() is True but int('²') raises: a 500 once (shared/adapters/oip/rest.py `_header_length`)."""
    decoded_or_refused(b'{"inputs": []}', {HEADER_LENGTH: b"\xb2"})  # latin-1 '²', as Starlette reads it


@st.composite
def binary_requests(draw: st.DrawFn) -> tuple[bytes, int, list[tuple[str, np.ndarray]], list[bool]]:
    """A valid binary-extension body: JSON head, then the binary inputs in order."""
    inputs = draw(st.lists(tensors(), min_size=1, max_size=4))
    binary = [draw(st.booleans()) for _ in inputs]
    heads, blobs = [], []
    binary = [b or not _json_can_carry(a) for b, (_, a) in zip(binary, inputs, strict=True)]
    for i, ((datatype, array), is_binary) in enumerate(zip(inputs, binary, strict=True)):
        head: dict[str, Any] = {"name": f"in{i}", "datatype": datatype, "shape": list(array.shape)}
        if is_binary or not _json_can_carry(array):
            blob = codec.to_raw(array)
            head["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            head["data"] = codec.to_json(array)
        heads.append(head)
    encoded = json.dumps(
        {"inputs": heads, "outputs": [{"name": "score", "parameters": {"binary_data": True}}]}
    ).encode()
    return encoded + b"".join(blobs), len(encoded), inputs, binary


@given(binary_requests())
def test_a_valid_binary_body_decodes_to_its_tensors(request: tuple[bytes, int, list[Any], list[bool]]) -> None:
    body, split, inputs, _ = request
    decoded = decoded_or_refused(body, {HEADER_LENGTH: str(split).encode()})
    assert isinstance(decoded, InferRequest), decoded
    for got, (datatype, array) in zip(decoded.inputs, inputs, strict=True):
        assert got.datatype == datatype and got.shape == array.shape
        np.testing.assert_array_equal(got.data, array)


@given(binary_requests(), st.data())
def test_a_wrong_binary_data_size_or_header_length_is_a_4xx(
    request: tuple[bytes, int, list[Any], list[bool]], data: st.DataObject
) -> None:
    body, split, _, binary = request
    head = json.loads(body[:split])
    blobs = body[split:]
    sized = [i for i, b in enumerate(binary) if b]
    if sized and data.draw(st.booleans()):
        i = data.draw(st.sampled_from(sized))
        old = head["inputs"][i]["parameters"]["binary_data_size"]
        new = data.draw(st.integers(-3, old + 10).filter(lambda n: n != old))
        head["inputs"][i]["parameters"]["binary_data_size"] = new
        encoded = json.dumps(head).encode()
        result = decoded_or_refused(encoded + blobs, {HEADER_LENGTH: str(len(encoded)).encode()})
    else:
        wrong = data.draw(st.integers(0, len(body) + 5).filter(lambda n: n != split))
        result = decoded_or_refused(body, {HEADER_LENGTH: str(wrong).encode()})
    assert isinstance(result, BadRequest)


@given(binary_requests(), st.data())
def test_a_corrupted_binary_body_is_a_request_or_a_4xx(
    request: tuple[bytes, int, list[Any], list[bool]], data: st.DataObject
) -> None:
    body, split, _, _ = request
    broken = data.draw(corrupted(body))
    decoded_or_refused(broken, {HEADER_LENGTH: str(min(split, len(broken))).encode()})


# -- through the app: the data plane's checks, and the status the caller gets -----------


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as c:
        yield c


fp32_rows = st.lists(
    st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=4, max_size=4), min_size=1, max_size=8
)
infer_bodies = (
    fp32_rows.map(
        lambda rows: {"inputs": [{"name": "features", "datatype": "FP32", "shape": [len(rows), 4], "data": rows}]}
    )
    | st.builds(
        lambda rows, name, datatype, shape, extra: {
            "inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": rows}],
            **extra,
        },
        fp32_rows | json_values,
        st.sampled_from(["features", "x"]),
        st.sampled_from(["FP32", "FP64", "INT32", "BYTES"]),
        shapes,
        st.dictionaries(st.sampled_from(["outputs", "parameters", "id"]), json_values, max_size=2),
    )
    | bodies
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=settings().max_examples // 3)
@given(infer_bodies)
@example({"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 1e39]}]})
@example({"inputs": [{"name": "features", "datatype": "FP32", "shape": [0, 4], "data": []}]})
@example(
    {"inputs": [{"name": "features", "datatype": "FP32", "shape": [0, 2**24, 2**24, 2**24], "data": []}]}
)  # was a 500
def test_any_v2_infer_request_is_answered_below_500(client: TestClient, body: Any) -> None:
    r = client.post("/v2/models/fraud/infer", content=json.dumps(body).encode())
    assert r.status_code < 500, r.text
    answer = r.json()
    if r.status_code == 200:
        [out] = answer["outputs"]
        assert out["shape"] == [len(body["inputs"][0]["data"]), 1]
        assert all(0.0 <= s <= 1.0 for s in out["data"])
    else:
        assert 400 <= r.status_code < 500 and list(answer) == ["error"] and answer["error"]


# -- the gRPC form (the same codec, typed contents or raw_input_contents) ----------------

contents = st.fixed_dictionaries(
    {},
    optional={
        "bool_contents": st.lists(st.booleans(), max_size=8),
        "int_contents": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
        "int64_contents": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8),
        "uint_contents": st.lists(st.integers(0, 2**32 - 1), max_size=8),
        "uint64_contents": st.lists(st.integers(0, 2**64 - 1), max_size=8),
        "fp32_contents": st.lists(st.floats(width=32), max_size=8),
        "fp64_contents": st.lists(st.floats(), max_size=8),
        "bytes_contents": st.lists(st.binary(max_size=8), max_size=8),
    },
)
grpc_inputs = st.builds(
    lambda datatype, shape, values: {"name": "features", "datatype": datatype, "shape": shape, "contents": values},
    datatypes,
    st.lists(st.integers(0, 4) | st.integers(-(2**63), 2**63 - 1), max_size=9),
    contents,
)


@given(st.lists(grpc_inputs, max_size=3), st.none() | st.lists(st.binary(max_size=40), max_size=3))
def test_any_grpc_infer_request_is_a_request_or_a_4xx(inputs: list[dict[str, Any]], raw: list[bytes] | None) -> None:
    from shared.adapters.oip import grpc_predict_v2_pb2 as pb
    from shared.adapters.oip.grpc_server import decode_infer as decode_grpc

    message = pb.ModelInferRequest(model_name="fraud", inputs=inputs, raw_input_contents=raw or [])
    try:
        decoded = decode_grpc(pb.ModelInferRequest.FromString(message.SerializeToString()))
    except BadRequest as exc:
        refused(exc)
        return
    for tensor in decoded.inputs:
        assert tensor.data.shape == tensor.shape and tensor.data.dtype == codec.DTYPES[tensor.datatype]
