from shared.stores.cache import codec


def test_small_values_are_stored_raw_behind_a_marker() -> None:
    value = codec.encode(b"0.25")
    assert value == codec.RAW + b"0.25"
    assert codec.decode(value) == b"0.25"


def test_large_values_are_lz4_compressed_and_round_trip() -> None:
    payload = b'{"user_avg_amount_30d": 54.2, "user_txn_count_24h": 3.0}' * 20
    value = codec.encode(payload)
    assert value[:1] == codec.LZ4 and len(value) < len(payload)
    assert codec.decode(value) == payload


def test_incompressible_large_values_stay_raw() -> None:
    payload = bytes(range(256))
    assert codec.encode(payload)[:1] == codec.RAW


def test_absent_unknown_or_corrupt_values_read_as_a_miss() -> None:
    assert codec.decode(None) is None
    assert codec.decode(b"") is None
    assert codec.decode(b"\x07junk") is None
    assert codec.decode(codec.LZ4 + b"\xff\xff\xff\x7fnot-lz4") is None
