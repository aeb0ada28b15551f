"""The shared reference's check: a value that does not describe the version is refused, part by part."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from shared.fleet.keys import SharedReference
from shared.fleet.references import MAX_SHARED_BYTES, Unshareable, checked, settle
from shared.stores.control import MemoryControlStore

NAMES = ("amount", "is_foreign", "score")
GOOD = SharedReference(
    columns=list(NAMES),
    bins=3,
    records=100,
    cuts=[[10.0, 20.0], [], [0.2, 0.5]],
    values=[None, [0.0, 1.0], None],
    counts=[[30, 40, 30, 0], [80, 20, 0, 0], [50, 25, 25, 0]],
)


def test_a_reference_that_describes_the_version_passes() -> None:
    assert checked(GOOD, NAMES) is GOOD


@pytest.mark.parametrize(
    "broken",
    [
        {"columns": ["amount", "is_foreign", "other"]},  # another version's columns
        {"bins": 1},
        {"records": 0},
        {"cuts": GOOD.cuts[:2]},  # a column's entry missing
        {"counts": [[30, 40, 30], *GOOD.counts[1:]]},  # fewer bins than it says
        {"counts": [[30, -1, 30, 0], *GOOD.counts[1:]]},
        {"cuts": [[10.0, 20.0, 30.0], [], [0.2, 0.5]]},  # more cut points than bins allow
        {"values": [None, [0.0, 1.0, 2.0, 3.0], None]},  # more values than bins
        {"cuts": [[10.0, float("inf")], [], [0.2, 0.5]]},
    ],
)
def test_a_reference_broken_anywhere_is_refused(broken: dict[str, Any]) -> None:
    with pytest.raises(Unshareable, match="the fleet's reference is unreadable"):
        checked(msgspec.structs.replace(GOOD, **broken), NAMES)


async def test_the_first_writer_wins_and_a_later_one_gets_the_first() -> None:
    store = MemoryControlStore()
    assert await settle(store, "k", None) is None  # nothing there, nothing to publish
    assert await settle(store, "k", GOOD) is GOOD
    later = msgspec.structs.replace(GOOD, replica="later")
    assert await settle(store, "k", later) == GOOD


async def test_a_reference_too_large_is_neither_written_nor_read() -> None:
    store = MemoryControlStore()
    huge = msgspec.structs.replace(GOOD, columns=["x" * MAX_SHARED_BYTES, "is_foreign", "score"])
    with pytest.raises(Unshareable, match="too large to share"):
        await settle(store, "k", huge)
    assert store.data == {}
    store.data["k"] = b" " * (MAX_SHARED_BYTES + 1)
    with pytest.raises(Unshareable, match="unreadable"):
        await settle(store, "k", None)
