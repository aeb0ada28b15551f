"""The fleet's records in the control store (Redis), each beside its key: the one place their shape is written.

    models:latest:{name}      LatestRecord      {"name", "version": "3", "fingerprint", "sha256", "at": epoch s}
    models:pin:{name}         PinRecord         {"version": "2" | null, "sha256", "at": epoch s}
    models:quarantine:{name}  QuarantineRecord  {"versions": {"3": "why"}}: versions no replica runs again
    models:shadow:{name}      ShadowRecord      {"version": "3" | null, "at": epoch s, "sha256"}
    models:canary:{name}      CanaryRecord      {"version": "3" | null, "weight": 0.1, "at": epoch s,
                                                 "aborted": {"reason": "decline_share", "at": epoch s} | null,
                                                 "last_abort": {"version": "2", "reason": "api", "at": epoch s} | null,
                                                 "sha256"}
    drift:reference:{model}:{version}:{fingerprint}
                              SharedReference   a version's drift reference: bins and counts, never rows

Who writes and follows them: versions (shared/fleet/versions.py), shadows and canaries
(shared/fleet/commands.py, shared/fleet/sync.py), drift references (shared/fleet/references.py).
A release is a record too (`version` null), never a deletion, so a *missing* record means "lost".
Records carry no TTL: under volatile-lru only keys with a TTL are evicted.
"""

from __future__ import annotations

import logging
from typing import Annotated, TypeVar

import msgspec

from shared.errors import ModelInvalid
from shared.models.repository import check_ref

__all__ = [
    "Aborted",
    "CanaryRecord",
    "LastAbort",
    "LatestRecord",
    "PinRecord",
    "QuarantineRecord",
    "ShadowRecord",
    "SharedReference",
    "canary_key",
    "decode_record",
    "encode",
    "latest_key",
    "legacy",
    "pin_key",
    "quarantine_key",
    "reference_key",
    "shadow_key",
]

log = logging.getLogger(__name__)


def latest_key(name: str) -> str:
    return f"models:latest:{name}"


def pin_key(name: str) -> str:
    return f"models:pin:{name}"


def quarantine_key(name: str) -> str:
    return f"models:quarantine:{name}"


def shadow_key(name: str) -> str:
    return f"models:shadow:{name}"


def canary_key(name: str) -> str:
    return f"models:canary:{name}"


def reference_key(model: str, version: str, fingerprint: str) -> str:
    """The control store's key of a version's shared reference (the fingerprint: the bytes it scores with)."""
    return f"drift:reference:{model}:{version}:{fingerprint}"


# -- versions ---------------------------------------------------------------------------------


class LatestRecord(msgspec.Struct, frozen=True):
    """`models:latest:{name}`: the newest version a replica installed, and its file's digest."""

    name: str
    version: str
    fingerprint: str = ""
    sha256: str = ""  # empty in a record written before records named digests: unchecked
    at: float = 0.0


class PinRecord(msgspec.Struct, frozen=True):
    """`models:pin:{name}`: the version pinned on every replica and its file's digest; None: released."""

    version: str | None
    sha256: str = ""
    at: float = 0.0


class QuarantineRecord(msgspec.Struct, frozen=True):
    """`models:quarantine:{name}`: the versions of `name` no replica runs again, and why."""

    versions: dict[str, str]


# -- shadows and canaries ---------------------------------------------------------------------


class Aborted(msgspec.Struct, frozen=True):
    """Why and when a canary was stopped."""

    reason: str
    at: float


class LastAbort(msgspec.Struct, frozen=True):
    """The last canary of a model that was aborted (kept when a new one is set)."""

    version: str
    reason: str
    at: float


class ShadowRecord(msgspec.Struct, frozen=True):
    """`models:shadow:{name}`: the version that shadows the model, or None (released)."""

    version: str | None
    at: float = 0.0
    sha256: str = ""  # the version's file; empty in a record written before records named digests


class CanaryRecord(msgspec.Struct, frozen=True):
    """`models:canary:{name}`: the candidate and its weight; `aborted` once stopped; None: cleared."""

    version: str | None
    weight: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    at: float = 0.0
    aborted: Aborted | None = None
    last_abort: LastAbort | None = None
    sha256: str = ""

    @property
    def running(self) -> bool:
        """Whether it names a candidate that was not aborted (weight 0 included)."""
        return self.version is not None and self.aborted is None


# -- drift ------------------------------------------------------------------------------------


class SharedReference(msgspec.Struct, frozen=True):
    """A version's frozen reference as the fleet shares it: bins and counts, never rows."""

    columns: list[str]  # the version's columns, then `score`
    bins: int  # DRIFT_BINS of the replica that built it
    records: int  # the records it was built from
    cuts: list[list[float]]  # per column, its cut points ([] for a discrete column)
    values: list[list[float] | None]  # per column, its distinct values (None for a continuous one)
    counts: list[list[int]]  # per column, reference records per bin (bins + 1 of them)
    replica: str = ""  # who built it
    at: float = 0.0  # when (epoch seconds)


# -- reading and writing ----------------------------------------------------------------------

R = TypeVar("R", bound=msgspec.Struct)


def decode_record(name: str, payload: bytes | None, kind: type[R]) -> R | None:
    """The record, or None where there is none or it is corrupt (a corrupt record reads as absent)."""
    if not payload:
        return None
    try:
        record = msgspec.json.decode(payload, type=kind)
        version = getattr(record, "version", None)
        if version is not None:
            check_ref(name, version)
    except (msgspec.DecodeError, msgspec.ValidationError, ModelInvalid):
        log.warning("a corrupt %s of %r reads as absent: %r", kind.__name__, name, payload[:200])
        return None
    return record


def encode(record: msgspec.Struct) -> bytes:
    """A record as the control store keeps it (JSON)."""
    return msgspec.json.encode(record)


def legacy(record: LatestRecord | PinRecord) -> bool:
    """A record from before records named digests: a version it names without the file's SHA-256."""
    return getattr(record, "version", None) is not None and not record.sha256
