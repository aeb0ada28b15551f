"""V2 tensors ↔ numpy arrays: the datatypes, JSON `data`, and the binary form.

    BOOL UINT8 UINT16 UINT32 UINT64 INT8 INT16 INT32 INT64 FP16 FP32 FP64 BYTES

The binary form (gRPC `raw_input_contents`, the HTTP binary-data extension) is little-endian,
row-major; BOOL is one byte per element; BYTES is each element as a 4-byte little-endian
length then its bytes. JSON `data` may be flat or nested (it is flattened, row-major); nested,
each level holds as many lists as its dimension (ragged data of the right total count is
refused, not reshaped). Anything that does not fit its declared shape or datatype is `BadRequest`, never another
exception (tests/adapters/oip/test_codec_properties.py holds the properties).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.errors import BadRequest

__all__ = ["DTYPES", "Tensor", "datatype_of", "element_count", "from_json", "from_raw", "to_json", "to_raw"]

Tensor = npt.NDArray[Any]

DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
_NAMES = {dtype.str: name for name, dtype in DTYPES.items() if name != "BYTES"}
MAX_ELEMENTS = 1 << 24  # no tensor this service takes comes near: a guard against a shape that lies
MAX_RANK = 8


def element_count(shape: Sequence[int]) -> int:
    """The elements of `shape`; `BadRequest` for a negative or absurd dimension."""
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape):
        raise BadRequest(f"shape {list(shape)} must be non-negative integers")
    if len(shape) > MAX_RANK:
        raise BadRequest(f"shape {list(shape)} has more than {MAX_RANK} dimensions")
    if any(d > MAX_ELEMENTS for d in shape):  # [0, 10**20] has no elements, and no array can take it
        raise BadRequest(f"shape {list(shape)} has a dimension over {MAX_ELEMENTS}")
    # NOTE: numpy sizes an array by its non-zero dimensions too: [0, 3, 4, 2905, 7102, 16384, 2273850]
    # holds nothing, yet `reshape` to it raises ValueError ("array is too big").
    if math.prod(d for d in shape if d) > MAX_ELEMENTS:
        raise BadRequest(f"shape {list(shape)} has more than {MAX_ELEMENTS} elements (or would, without its zeros)")
    return math.prod(shape)


def _dtype(datatype: str) -> np.dtype[Any]:
    dtype = DTYPES.get(datatype)
    if dtype is None:
        raise BadRequest(f"unknown datatype {datatype!r} (expected one of {', '.join(DTYPES)})")
    return dtype


def from_json(datatype: str, shape: Sequence[int], data: Any) -> Tensor:
    """A tensor from JSON `data` (flat or nested, row-major)."""
    dtype, count = _dtype(datatype), element_count(shape)
    flat = _flatten(data, shape)
    if len(flat) != count:
        raise BadRequest(f"data has {len(flat)} elements, shape {list(shape)} needs {count}")
    kinds = set(map(type, flat))  # one pass in C; JSON gives exact types (a bool is not an int here)
    if datatype == "BYTES":
        if not kinds <= {str}:
            raise BadRequest("BYTES data must be strings")
        array = np.empty(count, dtype=object)
        array[:] = [v.encode() for v in flat]
        return array.reshape(shape)
    if datatype == "BOOL":
        if not kinds <= {bool}:
            raise BadRequest("BOOL data must be true or false")
    elif not kinds <= {int, float}:
        raise BadRequest(f"{datatype} data must be numbers")
    elif dtype.kind in "iu" and float in kinds:
        raise BadRequest(f"{datatype} data must be integers")
    try:
        with np.errstate(over="raise", invalid="raise"):
            array = np.array(flat, dtype=dtype)
    except (OverflowError, FloatingPointError, ValueError) as exc:
        raise BadRequest(f"{datatype} data out of range: {exc}") from exc
    return array.reshape(shape)


def _flatten(data: Any, shape: Sequence[int]) -> list[Any]:
    """Row-major elements of `data`: a flat list, or lists nested along `shape` (each level as
    long as its dimension; a level may hold the rest of its row flat)."""
    if not isinstance(data, list):
        raise BadRequest("tensor data must be a JSON array")
    if not data or not isinstance(data[0], list):
        return data  # flat, what tritonclient sends: its length is checked against the shape
    flat: list[Any] = []
    _collect(data, shape, 0, flat)
    return flat


def _collect(data: list[Any], shape: Sequence[int], level: int, flat: list[Any]) -> None:
    if not data or not isinstance(data[0], list):
        if len(data) != math.prod(shape[level:]):
            need = math.prod(shape[level:])
            raise BadRequest(
                f"tensor data has {len(data)} values at depth {level + 1}; shape {list(shape)} needs {need}"
            )
        flat.extend(data)
        return
    if level >= len(shape) - 1:
        raise BadRequest("tensor data is nested deeper than its shape")
    if len(data) != shape[level]:
        raise BadRequest(
            f"tensor data has {len(data)} lists at depth {level + 1}; shape {list(shape)} needs {shape[level]}"
        )
    for item in data:
        if not isinstance(item, list):
            raise BadRequest("tensor data mixes lists and values at one depth")
        _collect(item, shape, level + 1, flat)


def from_raw(datatype: str, shape: Sequence[int], raw: bytes) -> Tensor:
    """A tensor from its binary form."""
    dtype, count = _dtype(datatype), element_count(shape)
    if datatype == "BYTES":
        return _bytes_from_raw(raw, count).reshape(shape)
    if len(raw) != count * dtype.itemsize:
        raise BadRequest(f"{len(raw)} bytes of {datatype}; shape {list(shape)} needs {count * dtype.itemsize}")
    if datatype == "BOOL" and raw.strip(b"\x00\x01"):
        raise BadRequest("BOOL bytes must be 0 or 1")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _bytes_from_raw(raw: bytes, count: int) -> Tensor:
    items: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise BadRequest("BYTES element cut off in its length prefix")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise BadRequest("BYTES element longer than the data")
        items.append(raw[offset : offset + size])
        offset += size
    if len(items) != count:
        raise BadRequest(f"{len(items)} BYTES elements; the shape needs {count}")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array


def datatype_of(array: Tensor) -> str:
    """The V2 datatype of a numpy array."""
    if array.dtype == object:
        return "BYTES"
    name = _NAMES.get(array.dtype.newbyteorder("<").str if array.dtype.byteorder == ">" else array.dtype.str)
    if name is None:
        raise BadRequest(f"no V2 datatype for numpy {array.dtype}")
    return name


def to_json(array: Tensor) -> list[Any]:
    """Flat, row-major JSON data (BYTES as UTF-8 strings)."""
    if array.dtype == object:
        return [bytes(v).decode("utf-8", "replace") for v in array.reshape(-1)]
    values: list[Any] = array.reshape(-1).tolist()
    return values


def to_raw(array: Tensor) -> bytes:
    """The binary form of `array`."""
    if array.dtype == object:
        return b"".join(struct.pack("<I", len(v)) + bytes(v) for v in array.reshape(-1))
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
