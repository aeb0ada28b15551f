"""Outcomes kept beside the decisions: the prediction log's store, the same hashed ids.

    take(outcomes, now)    hash each event id with the log's key (raw ids never land), drop what was
                           already taken (the same content: its mark), append the rest to
                           `outcomes/date=.../hour=.../{replica}.jsonl` in the log's directory or
                           container, then mark them taken; answers True (written) or False
                           (a duplicate) per outcome, in order

A write is awaited before the answer, and marks are set only after it landed: an outcome is never
answered "written" unless its line is in the store, nor "duplicate" unless an earlier one landed. A
write that fails raises `Unavailable` (503; the queue holds its batch) and marks nothing, so the
retry writes it. Marks that fail after a write are logged, not raised: the line is in the store,
and the report drops a restated line by its digest (two replicas racing on one outcome end there too).

`RedisMarks` is the fleet's (SET with a TTL of the log's retention), `MemoryMarks` one process's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from shared.domain.outcomes import RETENTION_DAYS, Outcome, outcome_line
from shared.domain.records import encode_lines, hashed_id
from shared.errors import SinkError, Unavailable

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from shared.stores.prediction_log.sinks import Sink

__all__ = ["Marks", "MemoryMarks", "OutcomeStore", "RedisMarks"]

log = logging.getLogger(__name__)
MARK_TTL_S = RETENTION_DAYS * 86_400  # past it the decision is gone, and so is the need to know


class Marks(Protocol):
    """Which outcomes (hashed event id and digest) were already taken."""

    async def seen(self, keys: Sequence[str]) -> list[bool]: ...

    async def mark(self, keys: Sequence[str]) -> None: ...

    async def aclose(self) -> None: ...


class MemoryMarks:
    """One process's marks (no Redis): at most `size`, the oldest forgotten first."""

    def __init__(self, size: int = 1_000_000) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._size = size

    async def seen(self, keys: Sequence[str]) -> list[bool]:
        return [k in self._keys for k in keys]

    async def mark(self, keys: Sequence[str]) -> None:
        for k in keys:
            self._keys[k] = None
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)

    async def aclose(self) -> None:
        return None


class RedisMarks:
    """The fleet's marks: `{prefix}outcome:{event}:{digest}` with a TTL of the log's retention."""

    def __init__(self, client: Redis, prefix: str = "") -> None:
        self._client = client
        self._prefix = f"{prefix}outcome:"

    async def seen(self, keys: Sequence[str]) -> list[bool]:
        from redis.exceptions import RedisError

        try:
            found = await self._client.mget([self._prefix + k for k in keys])
        except (RedisError, OSError, TimeoutError) as exc:
            raise Unavailable(f"the outcome marks (Redis) did not answer: {type(exc).__name__}") from exc
        return [value is not None for value in found]

    async def mark(self, keys: Sequence[str]) -> None:
        async with self._client.pipeline(transaction=False) as pipe:
            for k in keys:
                pipe.set(self._prefix + k, b"1", ex=MARK_TTL_S)
            await pipe.execute()

    async def aclose(self) -> None:
        await self._client.aclose()


class OutcomeStore:
    """Outcomes into the log's store, each taken once (see the module's docstring)."""

    def __init__(self, sink: Sink, marks: Marks, key: bytes = b"") -> None:
        self._sink = sink
        self._marks = marks
        self._key = key

    async def take(self, outcomes: Sequence[Outcome], now: datetime) -> list[bool]:
        """Per outcome, in order: True when written now, False when the same content was taken before."""
        # NOTE: a microsecond apart, so that arrival orders the outcomes of one batch as it was sent
        lines = [
            outcome_line(o, hashed_id(o.event_id, self._key), now + timedelta(microseconds=i))
            for i, o in enumerate(outcomes)
        ]
        keys = [f"{line.event}:{line.digest}" for line in lines]
        seen = await self._marks.seen(keys) if keys else []
        fresh: dict[str, int] = {}  # key -> the index of its first outcome not seen before
        for i, (k, old) in enumerate(zip(keys, seen, strict=True)):
            if not old:
                fresh.setdefault(k, i)
        kept = [lines[i] for i in fresh.values()]
        if kept:
            await self._write(kept, now)
            try:
                await self._marks.mark(list(fresh))
            except Exception:
                log.warning("outcomes: %d written but not marked (a restatement is dropped by the report)", len(kept))
        firsts = set(fresh.values())
        return [i in firsts for i in range(len(lines))]

    async def _write(self, lines: Sequence[object], now: datetime) -> None:
        partition = ("outcomes", "", now.strftime("%Y-%m-%dT%H"))
        try:
            await self._sink.write(partition, encode_lines(lines), len(lines))
        except SinkError as exc:
            raise Unavailable(f"the outcome log did not take the batch: {exc.detail}") from exc

    async def aclose(self) -> None:
        await self._marks.aclose()
        await self._sink.aclose()
