"""The fleet's records as the control store keeps them: a record round-trips; a corrupt one reads as absent."""

from __future__ import annotations

import msgspec
import pytest

from shared.fleet.keys import (
    Aborted,
    CanaryRecord,
    LastAbort,
    LatestRecord,
    PinRecord,
    QuarantineRecord,
    ShadowRecord,
    canary_key,
    decode_record,
    encode,
    latest_key,
    legacy,
    pin_key,
    quarantine_key,
    reference_key,
    shadow_key,
)

RECORDS = [
    LatestRecord("fraud", "3", "fp", "ab" * 32, 1.0),
    PinRecord("2", "cd" * 32, 2.0),
    PinRecord(None, at=3.0),
    QuarantineRecord({"3": "a run over its bound"}),
    ShadowRecord("3", 4.0, "ef" * 32),
    CanaryRecord("3", 0.1, 5.0, Aborted("decline_share", 6.0), LastAbort("2", "api", 1.0), "01" * 32),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_reads_back_as_written(record: msgspec.Struct) -> None:
    assert decode_record("fraud", encode(record), type(record)) == record


def test_each_record_has_its_own_key_per_model() -> None:
    keys = [f("fraud") for f in (latest_key, pin_key, quarantine_key, shadow_key, canary_key)]
    assert len(set(keys)) == 5 and all(key.endswith(":fraud") for key in keys)
    assert reference_key("fraud", "3", "fp") == "drift:reference:fraud:3:fp"


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"{not json",
        b'{"version": 3}',  # a version is a string
        b'{"version": "3", "weight": 1.5}',  # a weight is a share
        b'{"version": "v3"}',  # not a version name (an integer)
    ],
)
def test_a_corrupt_record_reads_as_absent(payload: bytes) -> None:
    assert decode_record("fraud", payload, CanaryRecord) is None


def test_none_reads_as_absent() -> None:
    assert decode_record("fraud", None, PinRecord) is None


def test_a_record_without_a_digest_is_legacy_and_a_release_never_is() -> None:
    assert legacy(PinRecord("2")) and legacy(LatestRecord("fraud", "2"))
    assert not legacy(PinRecord("2", "ab" * 32)) and not legacy(PinRecord(None))


def test_a_running_canary_names_a_version_not_aborted() -> None:
    assert CanaryRecord("3", 0.0).running
    assert not CanaryRecord(None).running and not CanaryRecord("3", aborted=Aborted("api", 1.0)).running
