"""One decision as the prediction log keeps it: what was scored, with what, how it ended.

The core builds one `DecisionRecord` per recorded decision on the response path, so building
it is a handful of slot writes: references to what the answer already holds (the event id,
the row's array, the defaulted reasons, the timings dict), no copy and no encoding. Work
that costs comes later, off the response path:

    shadow scoring            fills `shadow` (shared/fleet/shadow.py)
    reason codes              fill `reasons` for review and decline (shared/models/explain.py)
    the log's writer          hashes the event id, names the row's columns, encodes (`encode_records`)
    drift                     reads `model`, `version`, `row`, `defaulted`, `score` in batches

`Line` is the one place the record's wire shape is defined (a JSON object per line in the
sink; docs: README, "The prediction log"). Raw identifiers of people never leave the process:
the event id is written as a keyed BLAKE2b hash (`hashed_id`), the user id not at all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from shared.domain.answers import ReasonCode
    from shared.domain.spec import Thresholds

__all__ = [
    "Arm", "DecisionRecord", "Line", "Shadowed", "Via", "encode_lines", "encode_records", "hashed_id",
]  # fmt: skip

Via = Literal["http", "batch", "grpc", "v2", "queue", "review"]
# "grpc": fraud.scoring.v1 (Score, ScoreStream); V2 is REST and gRPC alike; "review": a review's later outcome
Arm = Literal["live", "canary"]


def hashed_id(event_id: str, key: bytes = b"") -> str:
    """The event id as the log writes it: 32 hex digits of BLAKE2b, keyed by PREDICTION_LOG_HASH_KEY."""
    return hashlib.blake2b(event_id.encode(), digest_size=16, key=key).hexdigest()


_KEYED: dict[bytes, Any] = {}  # key -> a BLAKE2b state that has taken the key (the writer's one key, in practice)


def _hasher(key: bytes) -> Any:
    """A copy of this state hashes as `hashed_id` does, without compressing the key block again
    (a keyed BLAKE2b compresses the key as a block of its own: half the cost of a short id)."""
    state = _KEYED.get(key)
    if state is None:
        if len(_KEYED) > 16:
            _KEYED.clear()
        state = _KEYED[key] = hashlib.blake2b(digest_size=16, key=key)
    return state


_second: list[Any] = [None, ""]  # the last second formatted: records of one flush share their seconds
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))  # a lookup, not a format spec per record


def _iso(at: float) -> str:
    """`2026-12-01T15:26:05.123Z`: the second formatted once, its milliseconds per record
    (datetime.isoformat was a seventh of the writer's time)."""
    second, ms = divmod(int(at * 1000), 1000)
    if _second[0] != second:
        _second[0], _second[1] = second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    text: str = _second[1] + _MILLIS[ms]
    return text


class Shadowed(msgspec.Struct, frozen=True, gc=False):
    """What the shadow version said about the same row (`error` set when it could not score)."""

    version: str
    score: float | None
    decision: str | None
    error: str | None = None


class Line(msgspec.Struct, gc=False):
    """A record as the sink holds it: one JSON object per line, these keys in this order.

    A struct, encoded a chunk at a time (`encode_lines`: one C call for the chunk), not a
    dict per record through orjson: the writer's encoding was its largest cost (docs/benchmark.md).
    """

    event: str  # the keyed BLAKE2b hash of the event id ("" for V2 rows)
    at: str  # ISO 8601, milliseconds, UTC
    via: str
    model: str
    version: str
    fingerprint: str
    features: Any  # the row the model saw, by its declared column names (a `_row_type` struct)
    defaulted: dict[str, str]
    score: float
    decision: str
    reason: str
    review: Any
    timings_ms: dict[str, float]
    arm: str | None
    shadow: Shadowed | None
    reasons: Any


encode_lines = msgspec.json.Encoder().encode_lines  # every line ends with "\n"
_NONE_DEFAULTED: dict[str, str] = {}  # NOTE: written, never changed: the lines of records with no default share it
_ROWS: dict[int, tuple[Sequence[str], type[msgspec.Struct]]] = {}  # id(columns) -> (columns, its struct)


def _row_type(columns: Sequence[str]) -> type[msgspec.Struct]:
    """A struct whose fields are `columns` (renamed from f0, f1, ...): a row is one C call to build
    and encodes as `{"log_amount": 4.8, ...}`, where a dict built by zip cost four times as much."""
    known = _ROWS.get(id(columns))
    if known is not None and known[0] is columns:
        return known[1]
    fields = [f"f{i}" for i in range(len(columns))]
    kind = msgspec.defstruct("Row", fields, rename=dict(zip(fields, columns, strict=True)), gc=False)
    if len(_ROWS) > 256:  # a few versions live at a time; the column tuples are their mappers'
        _ROWS.clear()
    _ROWS[id(columns)] = (columns, kind)
    return kind


class DecisionRecord(msgspec.Struct, gc=False):
    """One decision; `logged`, `shadow` and `reasons` are set off the response path (or stay as they are).

    NOTE: gc=False: thousands wait in the log's buffer at a time, and the collector would walk
    each of them on every collection; a record refers to arrays, strings, numbers and the
    answer's dicts and Review, none of which can refer back to it, so it is in no cycle.
    """

    at: float  # epoch seconds
    via: Via
    event_id: str  # raw here, hashed when written
    model: str
    version: str
    fingerprint: str
    columns: Sequence[str]  # the model's declared features, in row order (shared, never copied)
    row: npt.NDArray[np.float32]
    defaulted: Mapping[str, str]  # defaulted feature -> why (missing, null, stale, invalid)
    score: float  # the deciding version's own score (a review's is in `review`)
    decision: str  # V2 rows (scores only): the decision their score takes
    reason: str
    timings: dict[str, float]  # ms per stage, as the answer holds them
    review: Any = None  # the answer's Review (a msgspec Struct), when there is one
    arm: Arm | None = None  # under a canary split: which arm decided
    thresholds: Thresholds | None = None  # those of the version that decided
    logged: bool = True  # False: sampled out of the log, recorded only for its shadow score
    shadow: Shadowed | None = None
    reasons: list[ReasonCode] | None = None  # review and decline: the features behind the score

    def as_line(self, key: bytes = b"") -> Line:
        """The record as the sink holds it (`encode_lines` writes a chunk of them)."""
        defaulted = self.defaulted
        event = hashed_id(self.event_id, key) if self.event_id else ""
        return Line(
            event,
            _iso(self.at),
            self.via,
            self.model,
            self.version,
            self.fingerprint,
            _row_type(self.columns)(*self.row.tolist()),
            plain_defaulted(defaulted),
            round(self.score, 6),
            self.decision,
            self.reason,
            self.review if self.review is None else _hashed_review(self.review, event),
            self.timings,
            self.arm,
            self.shadow,
            self.reasons,
        )

    def as_json(self, key: bytes = b"") -> dict[str, Any]:
        """The record's line as a dict (what a reader of the sink gets back)."""
        found: dict[str, Any] = msgspec.json.decode(encode_records([self], key))
        return found

    @property
    def partition(self) -> tuple[str, str, str]:
        """(model, version, UTC hour `YYYY-MM-DDTHH`): the sink's object a record lands in."""
        return self.model, self.version, datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H")


def _hashed_review(review: Any, event: str) -> Any:
    """The answer's Review as a line holds it: its `id` (the raw event id) is the line's hashed `event`."""
    return msgspec.structs.replace(review, id=event) if getattr(review, "id", "") else review


def plain_defaulted(defaulted: Mapping[str, str]) -> dict[str, str]:
    """A dict the encoder takes (the answer's defaulted reasons come as a read-only view).

    The answer's own dict when it is one (never changed after it was built: not copied)."""
    if type(defaulted) is dict:
        return defaulted
    return dict(defaulted) if defaulted else _NONE_DEFAULTED


def encode_records(records: Sequence[DecisionRecord], key: bytes = b"") -> bytes:
    """The records' lines (each a `Line`, as `as_line` builds it, ending in "\n"), in one encoding call.

    What `encode_lines([r.as_line(key) for r in records])` writes, byte for byte
    (tests/domain/test_records_properties.py holds them equal), at a fifth less CPU a record:
    the per-record steps are one loop, not a method call each; the keyed hash starts from a state
    that has taken the key; the row struct is found once per run of records sharing their columns;
    the milliseconds are a lookup. (The writer's encoding was most of its time: docs/benchmark.md.)
    A record that cannot be encoded raises, as `as_line` does (the log then encodes one by one).
    """
    if not records:
        return b""
    hasher, millis, second = _hasher(key), _MILLIS, _second
    columns = records[0].columns
    kind = _row_type(columns)
    lines = []
    for record in records:
        if record.columns is not columns:  # the struct of a run of records sharing their columns, found once
            columns, kind = record.columns, _row_type(record.columns)
        if record.event_id:
            state = hasher.copy()
            state.update(record.event_id.encode())
            event = state.hexdigest()
        else:
            event = ""
        at, ms = divmod(int(record.at * 1000), 1000)
        if second[0] != at:
            second[0], second[1] = at, datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        defaulted = record.defaulted
        lines.append(
            Line(
                event,
                second[1] + millis[ms],
                record.via,
                record.model,
                record.version,
                record.fingerprint,
                kind(*record.row.tolist()),
                defaulted if type(defaulted) is dict else plain_defaulted(defaulted),
                round(record.score, 6),
                record.decision,
                record.reason,
                record.review if record.review is None else _hashed_review(record.review, event),
                record.timings,
                record.arm,
                record.shadow,
                record.reasons,
            )
        )
    return encode_lines(lines)
