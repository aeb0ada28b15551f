"""Properties of the cache codec: what it writes reads back; anything else reads as a miss, never an error."""

from __future__ import annotations

import lz4.block
from hypothesis import example, given
from hypothesis import strategies as st

from shared.stores.cache import codec
from tests.strategies import corrupted

# Payloads LZ4 gains on (repeats) and payloads it does not (random bytes).
payloads = st.binary(max_size=4000) | st.builds(
    lambda unit, n: unit * n, st.binary(min_size=1, max_size=40), st.integers(1, 200)
)
thresholds = st.integers(0, 256)


@given(payloads, thresholds)
@example(b"", 0)
def test_what_is_encoded_decodes_to_itself(payload: bytes, compress_min_bytes: int) -> None:
    value = codec.encode(payload, compress_min_bytes=compress_min_bytes)
    assert value[:1] in (codec.RAW, codec.LZ4)
    assert len(value) <= len(payload) + 1  # compression is kept only where it gains
    assert codec.decode(value) == payload


@given(st.binary(max_size=2000))
@example(b"")
@example(codec.LZ4)  # regression: a marker with no size prefix raised ValueError
@example(codec.LZ4 + b"\x05")  # regression: a size prefix cut short raised ValueError
@example(codec.LZ4 + b"\x00\x00\x00\x80xyz")  # regression: a size with the top bit set raised ValueError
@example(codec.LZ4 + b"\xff\xff\xff\x7fnot-lz4")
def test_any_bytes_decode_to_bytes_or_a_miss(value: bytes) -> None:
    decoded = codec.decode(value)
    assert decoded is None or isinstance(decoded, bytes)


@given(st.data(), payloads.filter(lambda p: len(p) >= 64))
def test_a_corrupted_or_truncated_value_is_bytes_or_a_miss(data: st.DataObject, payload: bytes) -> None:
    """LZ4 has no checksum: a flipped byte may still decode, to other bytes. It never raises."""
    value = codec.encode(payload)
    broken = data.draw(corrupted(value))
    decoded = codec.decode(broken)
    assert decoded is None or isinstance(decoded, bytes)


@given(payloads.filter(lambda p: len(p) >= 64), st.data())
def test_a_truncated_lz4_value_is_a_miss(payload: bytes, data: st.DataObject) -> None:
    value = codec.encode(payload)
    if value[:1] != codec.LZ4:
        return
    cut = data.draw(st.integers(1, len(value) - 1))
    assert codec.decode(value[:cut]) is None


@given(st.integers(2, 255).map(lambda m: bytes([m])), st.binary(max_size=200))
def test_an_unknown_marker_is_a_miss(marker: bytes, body: bytes) -> None:
    """A value of another format (a later version of this codec, a foreign writer) is a miss."""
    assert codec.decode(marker + body) is None


@given(st.integers(codec.MAX_DECODED_BYTES + 1, 2**32 - 1), st.binary(max_size=64))
def test_a_block_claiming_more_than_the_cap_is_a_miss_before_any_allocation(size: int, block: bytes) -> None:
    assert codec.decode(codec.LZ4 + size.to_bytes(4, "little") + block) is None


def test_a_valid_block_over_the_cap_is_a_miss() -> None:
    """An LZ4 bomb: 200 KiB that expands to 80 MiB."""
    bomb = lz4.block.compress(bytes(80 << 20), store_size=True)
    assert len(bomb) < 400_000 and codec.decode(codec.LZ4 + bomb) is None
