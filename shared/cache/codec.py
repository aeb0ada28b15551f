"""The byte format of values in Redis: one marker byte, then the payload.

    0x00 + raw bytes              small values, where compression would not pay
    0x01 + LZ4 block (size-prefixed)

Anything else decodes as `None` (a miss), so a foreign or corrupt value never
becomes an error on the scoring path.
"""

from __future__ import annotations

import lz4.block

__all__ = ["decode", "encode"]

RAW = b"\x00"
LZ4 = b"\x01"


def encode(payload: bytes, *, compress_min_bytes: int = 64) -> bytes:
    """Marker + payload, LZ4-compressed when it is large enough to gain from it."""
    if len(payload) >= compress_min_bytes:
        packed = lz4.block.compress(payload, store_size=True)
        if len(packed) < len(payload):
            return LZ4 + bytes(packed)
    return RAW + payload


def decode(value: bytes | None) -> bytes | None:
    """The payload of an encoded value, or None when it is absent or unreadable."""
    if not value:
        return None
    marker, body = value[:1], value[1:]
    if marker == RAW:
        return body
    if marker == LZ4:
        try:
            return bytes(lz4.block.decompress(body))
        except lz4.block.LZ4BlockError:
            return None
    return None
