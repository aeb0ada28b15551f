"""The byte format of values in Redis: one marker byte, then the payload.

    0x00 + raw bytes              small values, where compression would not pay
    0x01 + LZ4 block (size-prefixed: 4 bytes little-endian, then the block)

Anything else decodes as `None` (a miss), so a foreign or corrupt value never
becomes an error on the scoring path: an unknown marker, an empty value, an LZ4
block that is truncated, corrupt, or claims more than `MAX_DECODED_BYTES`
(tests/stores/cache/test_codec_properties.py holds the properties). A RAW value carries
no check of its own: its reader validates what it expects (a score is 8 bytes, a
user context a JSON object).
"""

from __future__ import annotations

import lz4.block

__all__ = ["MAX_DECODED_BYTES", "decode", "encode"]

RAW = b"\x00"
LZ4 = b"\x01"
# what this service stores is small (a user context, a score, a result); a block that
# claims more is foreign or corrupt, and decoding it would allocate what it claims.
MAX_DECODED_BYTES = 1 << 26


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
    if marker == LZ4 and int.from_bytes(body[:4], "little") <= MAX_DECODED_BYTES:
        try:
            return bytes(lz4.block.decompress(body))
        except (lz4.block.LZ4BlockError, ValueError):  # ValueError: a size prefix cut short
            return None
    return None
