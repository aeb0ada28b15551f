"""Properties of a decision record's line: the features read back as the model saw them, and the
writer's chunk encoding is the one-record encoding, byte for byte.

The log is the record of what each payment was scored with: a feature that reads back as a
neighbouring float32 would be a record of a row the model never saw. The reader parses a line
with orjson (floats as float64); the model saw float32 values.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import orjson
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from shared.domain.records import DecisionRecord, Shadowed, encode_lines, encode_records

COLUMNS = tuple(f"f{i}" for i in range(6))
EDGES = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, -1.4e-45, 1.1754942e-38, 3.4028235e38], dtype=np.float32)

any_float32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
rows = arrays(np.float32, len(COLUMNS), elements=any_float32)


def record(row: Any, *, i: int = 0, columns: tuple[str, ...] = COLUMNS, **fields: Any) -> DecisionRecord:
    base: dict[str, Any] = {
        "at": 1_796_126_100.0 + i * 0.0137,
        "via": "http",
        "event_id": f"evt-{i}",
        "model": "fraud",
        "version": "3",
        "fingerprint": "9f2c41d7e0ab",
        "columns": columns,
        "row": row,
        "defaulted": {},
        "score": 0.25,
        "decision": "approve",
        "reason": "model",
        "timings": {"parse": 0.02, "model": 0.09},
    }
    return DecisionRecord(**(base | fields))


def written_features(line: bytes) -> list[Any]:
    features: dict[str, Any] = orjson.loads(line)["features"]
    return list(features.values())


@given(rows)
@example(EDGES[:6])
@example(EDGES[2:])
def test_every_feature_reads_back_as_the_float32_the_model_saw(row: np.ndarray[Any, Any]) -> None:
    for line in encode_records([record(row), record(row.copy(), i=1)]).splitlines():
        for value, seen in zip(written_features(line), row.tolist(), strict=True):
            if np.isfinite(seen):
                # NOTE: the bits, not ==: -0.0 == 0.0, and a sign lost is a value changed
                assert np.float32(value).tobytes() == np.float32(seen).tobytes()
            else:
                assert value is None  # NaN and infinities are written as null, as msgspec writes them


scores = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False),
    st.floats(min_value=0.0, max_value=1.0, width=32),
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**6), 10**6),
)
defaulted = st.sampled_from(
    [{}, {"f1": "missing"}, types.MappingProxyType({}), types.MappingProxyType({"f2": "stale"})]
)


@st.composite
def chunks(draw: st.DrawFn) -> list[DecisionRecord]:
    """Records as one partition's chunk holds them: mostly one version's columns, now and then others."""
    shared = COLUMNS
    out = []
    for i in range(draw(st.integers(1, 12))):
        columns = draw(st.sampled_from([shared, shared, shared, tuple(COLUMNS), COLUMNS[:3]]))
        row = draw(arrays(np.float32, len(columns), elements=any_float32))
        shadow = draw(st.sampled_from([None, Shadowed("4", 0.5, "review"), Shadowed("4", None, None, "failed")]))
        out.append(
            record(
                row,
                i=i,
                columns=columns,
                event_id=draw(st.sampled_from([f"evt-{i}", "", "é-%-\x00"])),
                score=draw(scores),
                defaulted=draw(defaulted),
                shadow=shadow,
                arm=draw(st.sampled_from([None, "live", "canary"])),
            )
        )
    return out


@given(chunks(), st.sampled_from([b"", b"chargebacks-2026"]))
def test_a_chunk_encodes_as_its_records_one_by_one(records: list[DecisionRecord], key: bytes) -> None:
    assert encode_records(records, key) == encode_lines([r.as_line(key) for r in records])
