"""V2 tensors ↔ numpy: every datatype both ways, and what does not fit its shape or type."""

from __future__ import annotations

import numpy as np
import pytest

from shared.adapters.oip import codec
from shared.errors import BadRequest

SAMPLES = {
    "BOOL": [[True, False, True], [False, False, True]],
    "UINT8": [[0, 255, 7], [1, 2, 3]],
    "UINT16": [[0, 65535, 7], [1, 2, 3]],
    "UINT32": [[0, 2**32 - 1, 7], [1, 2, 3]],
    "UINT64": [[0, 2**64 - 1, 7], [1, 2, 3]],
    "INT8": [[-128, 127, 0], [1, 2, 3]],
    "INT16": [[-(2**15), 2**15 - 1, 0], [1, 2, 3]],
    "INT32": [[-(2**31), 2**31 - 1, 0], [1, 2, 3]],
    "INT64": [[-(2**63), 2**63 - 1, 0], [1, 2, 3]],
    "FP16": [[0.5, -2.0, 1024.0], [1.0, 2.0, 3.0]],
    "FP32": [[0.25, -1.5, 2.0**100], [1.0, 2.0, 3.0]],
    "FP64": [[0.1, -1e308, 5e-324], [1.0, 2.0, 3.0]],
    "BYTES": [["a", "", "ünï"], ["x", "yz", "0"]],
}


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_json_and_raw_round_trip(datatype: str) -> None:
    data = SAMPLES[datatype]
    tensor = codec.from_json(datatype, [2, 3], data)
    assert tensor.shape == (2, 3) and codec.datatype_of(tensor) == datatype
    flat = [v for row in data for v in row]
    assert codec.to_json(tensor) == flat
    again = codec.from_raw(datatype, [2, 3], codec.to_raw(tensor))
    assert codec.to_json(again) == flat and codec.datatype_of(again) == datatype


def test_raw_is_little_endian_row_major_and_bytes_are_length_prefixed() -> None:
    assert codec.to_raw(codec.from_json("INT32", [2], [1, 256])) == b"\x01\x00\x00\x00\x00\x01\x00\x00"
    assert codec.to_raw(codec.from_json("BYTES", [2], ["ab", ""])) == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    assert codec.to_raw(codec.from_json("BOOL", [2], [True, False])) == b"\x01\x00"


def test_flat_and_nested_json_data_are_the_same_tensor() -> None:
    nested = codec.from_json("FP32", [2, 2], [[1, 2], [3, 4]])
    flat = codec.from_json("FP32", [2, 2], [1, 2, 3, 4])
    np.testing.assert_array_equal(nested, flat)


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "message"),
    [
        ("FP32", [2, 2], [1, 2, 3], "data has 3 elements, shape \\[2, 2\\] needs 4"),
        ("FP32", [-1, 2], [1, 2], "must be non-negative"),
        ("FP32", [1 << 20, 1 << 10], [], "more than"),
        ("FP33", [1], [1], "unknown datatype 'FP33'"),
        ("FP32", [1], ["1"], "FP32 data must be numbers"),
        ("FP32", [1], [True], "FP32 data must be numbers"),
        ("INT32", [1], [1.5], "INT32 data must be integers"),
        ("INT8", [1], [300], "out of range"),
        ("UINT8", [1], [-1], "out of range"),
        ("BOOL", [1], [1], "BOOL data must be true or false"),
        ("BYTES", [1], [1], "BYTES data must be strings"),
        ("FP32", [1], {"a": 1}, "must be a JSON array"),
    ],
)
def test_json_that_does_not_fit_is_a_bad_request(datatype: str, shape: list[int], data: object, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        codec.from_json(datatype, shape, data)


@pytest.mark.parametrize(
    ("datatype", "shape", "raw", "message"),
    [
        ("FP32", [2], b"\x00" * 7, "7 bytes of FP32; shape \\[2\\] needs 8"),
        ("BOOL", [2], b"\x01\x02", "BOOL bytes must be 0 or 1"),
        ("BYTES", [1], b"\x05\x00\x00\x00ab", "longer than the data"),
        ("BYTES", [1], b"\x05\x00", "cut off"),
        ("BYTES", [2], b"\x01\x00\x00\x00a", "1 BYTES elements; the shape needs 2"),
    ],
)
def test_raw_that_does_not_fit_is_a_bad_request(datatype: str, shape: list[int], raw: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        codec.from_raw(datatype, shape, raw)


@pytest.mark.parametrize(
    ("shape", "data", "message"),
    [
        ([0, 10**20], [], "dimension over"),  # no elements, and no array can take the shape
        ([1] * 9, [1.0], "more than 8 dimensions"),
        ([1], [[[[1.0]]]], "nested deeper than its shape"),
    ],
)
def test_a_shape_or_nesting_that_lies_is_a_bad_request_not_an_error(
    shape: list[int], data: object, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        codec.from_json("FP32", shape, data)
    with pytest.raises(BadRequest):
        codec.from_raw("FP32", shape, b"")


def test_data_nested_a_thousand_deep_is_a_bad_request() -> None:
    deep: object = [1.0]
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(BadRequest):
        codec.from_json("FP32", [1, 1], deep)
