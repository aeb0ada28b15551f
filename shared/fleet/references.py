"""One drift reference per fleet: a version's frozen reference as replicas share it in the control store.

A reference is shared as its bins and its counts per bin (`SharedReference`, a few KB at the
defaults, never rows) under `drift:reference:{model}:{version}:{fingerprint}` (both drawn in
shared/fleet/keys.py), written with a set-if-absent (SET NX): the first replica to publish a
version's wins, and the key never changes after (control records carry no TTL; a rollback to an older version finds its
reference still there). shared/fleet/drift.py decides when to ask and what to do with the answer.

    settle(store, key, own)    own published (first writer) → own · another's there → that one
                               · none there and nothing to publish → None
                               ControlStoreDown: the store does not answer
                               Unshareable: own too large, or the one found unreadable

A value over MAX_SHARED_BYTES is neither written nor decoded; `checked` refuses one that does
not describe a version of the given columns (a mutation test breaks each part of it).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from shared.errors import Unshareable
from shared.fleet.keys import SharedReference
from shared.stores.control import ControlStore

__all__ = ["MAX_SHARED_BYTES", "Unshareable", "checked", "settle"]

MAX_SHARED_BYTES = 256 * 1024  # a reference larger than this is kept local (the defaults: ~5 KB)


async def settle(store: ControlStore, key: str, own: SharedReference | None) -> SharedReference | None:
    """The fleet's reference under `key`: `own` if this call published it, else the one there
    (None: none yet). `ControlStoreDown` when the store fails; `Unshareable` (see the module)."""
    if own is not None:
        payload = msgspec.json.encode(own)
        if len(payload) > MAX_SHARED_BYTES:
            raise Unshareable(f"this replica's reference is too large to share ({len(payload):,} bytes)")
        if await store.write_if_absent(key, payload):
            return own
    found = (await store.read([key]))[0]
    if found is None:
        return None
    if len(found) > MAX_SHARED_BYTES:
        raise Unshareable(f"the fleet's reference is unreadable ({len(found):,} bytes)")
    try:
        return msgspec.json.decode(found, type=SharedReference)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec.ValidationError is a DecodeError
        raise Unshareable(f"the fleet's reference is unreadable ({exc})") from exc


def checked(reference: SharedReference, names: Sequence[str]) -> SharedReference:
    """`reference`, if it describes a version of these columns (its shape whole); else `Unshareable`."""
    try:
        _check(reference, names)
    except ValueError as exc:
        raise Unshareable(f"the fleet's reference is unreadable ({exc})") from exc
    return reference


def _check(reference: SharedReference, names: Sequence[str]) -> None:
    width, slots = len(names), reference.bins + 1
    if tuple(reference.columns) != tuple(names):
        raise ValueError("its columns are not this version's")
    if not 2 <= reference.bins <= 100 or reference.records < 1:
        raise ValueError(f"bins {reference.bins} or records {reference.records} out of range")
    if not len(reference.cuts) == len(reference.values) == len(reference.counts) == width:
        raise ValueError("not one entry per column")
    for cuts, values, counts in zip(reference.cuts, reference.values, reference.counts, strict=True):
        if len(counts) != slots or min(counts) < 0 or len(cuts) > reference.bins - 1:
            raise ValueError("a column's counts or cut points do not fit its bins")
        if values is not None and len(values) > reference.bins:
            raise ValueError("a column holds more values than bins")
        if not all(np.isfinite(cuts)) or (values is not None and not all(np.isfinite(values))):
            raise ValueError("a column's bins are not finite numbers")
