"""The prediction log: decisions kept on the response path for a few slot writes, written later.

    response path    wants() (the sample)  →  add(record): one append to a bounded deque, or a drop
    writer (run)     every flush_s, or as soon as `soon` records are held:
                       take what is held, HAND_OVER records at a time:
                         subscribers(batch)          reason codes, drift (before encoding: they fill fields;
                                                     the codes' model run in a worker thread, awaited)
                         encode, a chunk at a time   CHUNK records, encode_records per partition, a pause
                                                     of PAUSE_S after each
                       write each partition's lines, up to the sink's write_bytes a call; a sink that fails keeps them pending
                       (retried after flush_s, doubling to 5 s), as new records keep arriving
    aclose           the same, retried until CLOSE_S; what is left is dropped and counted

This object alone owns the deque, the pending lines and the counters; only its writer calls the
sink. Every record offered to `add` ends in exactly one count, so at rest

    recorded == written + dropped_full + dropped_sink + dropped_shutdown + buffered

`dropped_full`: the buffer held `policy.buffer` records (pending lines included) when it came;
`dropped_sink`: the sink refused it for good (a permanent 4xx, a name no path can hold) or it
could not be encoded; `dropped_shutdown`: still held when CLOSE_S ran out, or offered after
aclose. With no sink (drift alone) a record handed to the subscribers counts as `written`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

import msgspec

from shared.domain.answers import PredictionLogStats, Review
from shared.domain.records import DecisionRecord, encode_records
from shared.errors import SinkError
from shared.policies import PredictionLogPolicy
from shared.stores.prediction_log.sinks import Partition, Sink
from shared.telemetry import metrics

__all__ = ["CHUNK", "CLOSE_S", "HAND_OVER", "PAUSE_S", "SOON", "PredictionLog", "Subscriber"]

log = logging.getLogger(__name__)
# a subscriber may answer an awaitable (reason codes: their model run in a worker thread); the
# writer awaits it before the batch is encoded
Subscriber = Callable[[Sequence[DecisionRecord]], Awaitable[None] | None]
# records handed to the subscribers at once: reason codes make one model run for all of
# a batch's review and decline rows, ~24 µs a row at 7 of them (a chunk of 64 records: 2.7 µs a
# record, before) and ~13 µs at 28 or more; 256 records hold the loop ~0.4 ms. 512 took ~0.9 µs
# a record less of the loop, and gave a p99 at 16 connections of 4.8-5.2 ms against 4.6-4.7
# (docs/benchmark.md, "2026-12-02, morning")
HAND_OVER = 256
CHUNK = 64  # records encoded at once: ~0.25 ms of the loop at ~4 µs a record
PAUSE_S = 0.0005  # between chunks: the loop serves requests for at least this long
SOON = 5_000  # records held that wake the writer before flush_s (or half the buffer, when smaller)
# the longest wait between two tries of a failing sink: one try in 5 s is nothing to a storage
# account, and each second waited past its return drops a second of records at capacity (with
# 30 s, a 20 s outage dropped 33 s of them, the buffer's 5 s aside: bench/rollouts.py)
BACKOFF_MAX_S = 5.0
# the longest shutdown waits for the writer to send what it holds: well inside the 30 s a Container
# App gives a stopping replica before it kills it (terminationGracePeriodSeconds' default)
CLOSE_S = 5.0
CLOSE_RETRY_S = 0.1  # the wait between tries while shutting down
RECENT_S = 60.0  # a drop this recent shows in readiness


class _Pending:
    """Encoded lines of one partition the sink has not taken yet (appended to, taken from the front)."""

    __slots__ = ("count", "lines")

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.count = 0


class PredictionLog:
    """Decision records from the response path to a sink (or only to subscribers when `sink` is None)."""

    def __init__(self, policy: PredictionLogPolicy, sink: Sink | None, *, replica: str) -> None:
        self._policy = policy
        self._sink = sink
        self._replica = replica
        self._key = (policy.hash_key or "").encode()
        self._limit = policy.buffer
        self._soon = min(SOON, policy.buffer // 2)
        self._sample = policy.sample
        self._every = policy.sample >= 1.0
        self._records: deque[DecisionRecord] = deque()
        self._outcomes_held = False  # a review's outcome waits among the records (`add_outcome`)
        self._pending: dict[Partition, _Pending] = {}
        self._pending_count = 0
        self._subscribers: list[Subscriber] = []
        self._complained: dict[int, float] = {}  # id(subscriber) -> when its failure was last logged
        self._stats = PredictionLogStats(sink=sink.name if sink is not None else "none")
        self._closed = False
        self._failure: tuple[str, float, float] | None = None  # (detail, first, latest) while the sink fails
        self._dropped_at = -RECENT_S
        self._backoff = policy.flush_s
        self._retry_at = 0.0
        self._wake: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._sending: asyncio.Task[bool] | None = None

    # -- the response path ------------------------------------------------------------------

    def wants(self) -> bool:
        """Whether to record this decision (the sample): no random draw when every one is kept."""
        return self._every or random.random() < self._sample  # noqa: S311 a sample, not a secret

    def add(self, record: DecisionRecord) -> None:
        """Hold `record` for the writer, or drop and count it when the buffer is full. Never blocks."""
        stats = self._stats
        stats.recorded += 1
        if self._closed:
            stats.dropped_shutdown += 1
            metrics.prediction_records("dropped_shutdown")
            return
        held = len(self._records)
        if held + self._pending_count >= self._limit:
            stats.dropped_full += 1
            metrics.prediction_records("dropped_full")
            self._dropped_at = time.monotonic()
            return
        self._records.append(record)
        if held + 1 == self._soon and self._wake is not None:
            self._wake.set()

    def add_outcome(self, record: DecisionRecord) -> None:
        """Hold a review's later outcome (`via="review"`): written like a decision's record, never
        handed to subscribers (it is no decision: no reason codes, no drift)."""
        self._outcomes_held = True
        self.add(record)

    def on(self, kind: Literal["batch"], fn: Subscriber) -> None:
        """Hand every batch the writer takes to `fn`, before it is encoded, in the order subscribed
        (its exceptions are logged; an awaitable it answers is awaited first)."""
        self._subscribers.append(fn)

    # -- the writer -------------------------------------------------------------------------

    async def run(self) -> None:
        """The writer: flush every flush_s, or as soon as many records are held, until cancelled."""
        wake = self._wake = asyncio.Event()
        while not self._closed:
            try:
                async with asyncio.timeout(self._policy.flush_s):
                    await wake.wait()
            except TimeoutError:
                pass
            wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Take what is held (subscribers, encoding), then write what is pending unless backing off."""
        async with self._locked():
            await self._settle()
            busy = bool(self._records or self._pending)
            await self._take()
            if self._sink is not None and self._pending and time.monotonic() >= self._retry_at:
                await self._write_pending(self._sink)
            if busy:
                self._stats.flushes += 1
            metrics.prediction_buffered(self._held())

    async def aclose(self) -> None:
        """Write what is held within CLOSE_S; count the rest `dropped_shutdown`; close the sink."""
        self._closed = True
        try:
            async with asyncio.timeout(CLOSE_S):
                await self._drain()
        except TimeoutError:
            pass
        self._drop_the_rest()
        if self._sink is not None:
            await self._sink.aclose()

    async def _drain(self) -> None:
        async with self._locked():
            await self._settle()
            await self._take()
            while self._pending and self._sink is not None:
                await self._write_pending(self._sink)
                if self._pending:
                    await asyncio.sleep(CLOSE_RETRY_S)

    def _drop_the_rest(self) -> None:
        left = self._held()
        if self._sending is not None and not self._sending.done():
            self._sending.cancel()  # NOTE: abandoned: counted here, though a write already sent may still land
        if left:
            log.warning("prediction log: %d records not written within %.1f s of shutdown", left, CLOSE_S)
            self._stats.dropped_shutdown += left
            metrics.prediction_records("dropped_shutdown", left)
        self._records.clear()
        self._pending.clear()
        self._pending_count = 0
        metrics.prediction_buffered(0)

    async def _settle(self) -> None:
        """Let a write that a cancelled writer left in flight end (and count itself) first."""
        if self._sending is not None and not self._sending.done():
            await asyncio.wait({self._sending})

    def _locked(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()  # made inside the running loop, on first use
        return self._lock

    # -- taking: subscribers and encoding, a chunk at a time ---------------------------------

    async def _take(self) -> None:
        """Hand over and encode what is held now (not what arrives meanwhile), yielding between chunks."""
        records, left = self._records, len(self._records)
        outcomes, self._outcomes_held = self._outcomes_held, False  # one arriving meanwhile sets it again
        while left:
            batch = [records.popleft() for _ in range(min(left, HAND_OVER))]
            left -= len(batch)
            if self._sink is None:
                await self._hand_over([r for r in batch if r.via != "review"] if outcomes else batch)
                self._stats.written += len(batch)  # no sink: the subscribers were its destination
                if left:
                    await asyncio.sleep(PAUSE_S)
                continue
            kept = 0  # the batch's records encoded so far
            try:
                await self._hand_over([r for r in batch if r.via != "review"] if outcomes else batch)
                # drift and ranking the reason codes held the loop: encoding would add to it
                await asyncio.sleep(PAUSE_S)
                for start in range(0, len(batch), CHUNK):
                    chunk = batch[start : start + CHUNK]
                    self._encode(self._grouped(chunk))
                    kept = start + len(chunk)
                    # NOTE: a pause, not a bare yield: a request needs several turns of the loop, and
                    # with a chunk on every turn it paid for several (p99 6-9 ms at 16 connections)
                    await asyncio.sleep(PAUSE_S)
            except BaseException:
                # cancelled (shutdown) while a subscriber ran or at a pause: the batch's rest
                # is encoded at once, so no record taken is lost
                if kept < len(batch):
                    self._encode(self._grouped(batch[kept:]))
                raise

    async def _hand_over(self, chunk: list[DecisionRecord]) -> None:
        for fn in self._subscribers:
            try:
                pending = fn(chunk)
                if pending is not None:
                    await pending
            except Exception:
                self._complain(fn)

    def _complain(self, fn: Subscriber) -> None:
        now, last = time.monotonic(), self._complained.get(id(fn))
        if last is None or now - last > RECENT_S:
            self._complained[id(fn)] = now
            log.exception("prediction log: subscriber %s failed (logged once a minute at most)", _name(fn))

    def _grouped(self, chunk: list[DecisionRecord]) -> list[list[DecisionRecord]]:
        """The chunk's records by partition (model, version, UTC hour), each in arrival order."""
        groups: dict[tuple[str, str, int], list[DecisionRecord]] = {}
        for record in chunk:
            if getattr(record.review, "rationale", ""):  # a review is on few records (the uncertain tail)
                record.review = _without_rationale(record.review)
            hour = (record.model, record.version, int(record.at // 3600))  # epoch hours are UTC hours
            group = groups.get(hour)
            if group is None:
                group = groups[hour] = []
            group.append(record)
        return list(groups.values())

    def _encode(self, groups: list[list[DecisionRecord]]) -> None:
        """Each group's JSON lines (one encoding call per group), appended to its partition's pending lines."""
        key = self._key
        for group in groups:
            count = len(group)
            try:
                lines = encode_records(group, key)
            except Exception:  # one record the encoder refuses: each on its own, that one counted
                lines, count = self._encode_each(group)
            if not count:
                continue
            partition = group[0].partition
            pending = self._pending.get(partition)
            if pending is None:
                pending = self._pending[partition] = _Pending()
            pending.lines.append(lines)
            pending.count += count
            self._pending_count += count

    def _encode_each(self, group: list[DecisionRecord]) -> tuple[bytes, int]:
        """The lines of the records that encode; the others counted (whatever a record holds, it is never lost uncounted)."""
        lines: list[bytes] = []
        for record in group:
            try:
                lines.append(encode_records([record], self._key))
            except Exception as exc:
                self._unwritable(record, exc)
        return b"".join(lines), len(lines)

    def _unwritable(self, record: DecisionRecord, exc: Exception) -> None:
        log.warning("prediction log: a record of %s/%s cannot be encoded: %s", record.model, record.version, exc)
        self._stats.dropped_sink += 1
        metrics.prediction_records("dropped_sink")
        self._dropped_at = time.monotonic()

    # -- writing ------------------------------------------------------------------------------

    async def _write_pending(self, sink: Sink) -> None:
        """Each pending partition's lines, the sink's `write_bytes` a write (joining a second's ~9 MB at
        once held the loop for milliseconds), in order; the first transient failure ends the round."""
        for partition in list(self._pending):
            while partition in self._pending:
                self._sending = asyncio.ensure_future(self._send(sink, partition))
                # NOTE: shielded: a writer cancelled at shutdown leaves the write to end and count itself
                if not await asyncio.shield(self._sending):
                    return
        self._recovered()

    async def _send(self, sink: Sink, partition: Partition) -> bool:
        """Write `partition`'s leading pending lines once and count what landed; whether the sink took
        them or refused them for good (False: a transient failure, retried later)."""
        pending = self._pending[partition]
        lines = _leading(pending, sink.write_bytes)
        count = pending.count if len(pending.lines) == 1 else lines.count(b"\n")
        try:
            await sink.write(partition, lines, count)
        except SinkError as exc:
            self._landed(partition, lines, count, exc.landed)
            if exc.permanent:
                self._refused(partition, exc)
                return True
            self._failed(exc)
            return False
        self._recovered()  # NOTE: first: the moment the records count as written, the sink is well again
        self._landed(partition, lines, count, len(lines))
        return True

    def _landed(self, partition: Partition, lines: bytes, count: int, landed: int) -> None:
        """The leading `landed` bytes of `lines` (the first of the partition's pending, `count`
        records) are in the sink."""
        if landed <= 0:
            return
        pending = self._pending[partition]
        if landed == len(lines):
            del pending.lines[0]
        else:
            count = lines.count(b"\n", 0, landed)
            pending.lines[0] = lines[landed:]
        pending.count -= count
        self._pending_count -= count
        if not pending.lines:
            del self._pending[partition]
        self._written(count)

    def _written(self, count: int) -> None:
        self._stats.written += count
        metrics.prediction_records("written", count)

    def _refused(self, partition: Partition, exc: SinkError) -> None:
        pending = self._pending[partition]
        log.error(
            "prediction log: the %s sink refused %d records of %s for good: %s",
            self._name,
            pending.count,
            "/".join(partition),
            exc.detail,
        )
        self._stats.dropped_sink += pending.count
        metrics.prediction_records("dropped_sink", pending.count)
        self._pending_count -= pending.count
        del self._pending[partition]
        self._dropped_at = time.monotonic()

    def _failed(self, exc: SinkError) -> None:
        now = time.monotonic()
        self._stats.failures += 1
        if self._failure is None:
            log.warning(
                "prediction log of %s: the %s sink failed (%s); retrying, records kept",
                self._replica,
                self._name,
                exc.detail,
            )
        first = now if self._failure is None else self._failure[1]
        self._failure = (exc.detail, first, now)
        self._retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, max(BACKOFF_MAX_S, self._policy.flush_s))

    def _recovered(self) -> None:
        if self._failure is not None:
            log.warning(
                "prediction log: the %s sink took the records again after %.0f s",
                self._name,
                time.monotonic() - self._failure[1],
            )
        self._failure = None
        self._backoff = self._policy.flush_s
        self._retry_at = 0.0

    # -- what it reports ----------------------------------------------------------------------

    @property
    def _name(self) -> str:
        return self._stats.sink

    def _held(self) -> int:
        return len(self._records) + self._pending_count

    def stats(self) -> PredictionLogStats:
        """The counters (the same object, `buffered` brought up to date)."""
        self._stats.buffered = self._held()
        return self._stats

    def problem(self) -> str | None:
        """Readiness's degraded reason while the sink fails or records were dropped within a minute."""
        now, stats = time.monotonic(), self.stats()
        dropped = stats.dropped_full + stats.dropped_sink + stats.dropped_shutdown
        held = f"{stats.buffered:,} records held, {dropped:,} dropped"
        if self._failure is not None:
            detail, first, latest = self._failure
            return (
                f"predictions: the {self._name} sink has failed for {now - first:.0f} s "
                f"({detail}, {now - latest:.0f} s ago); {held}"
            )
        if now - self._dropped_at < RECENT_S:
            return (
                f"predictions: records dropped {now - self._dropped_at:.0f} s ago (buffer full {stats.dropped_full:,}, "
                f"sink refused {stats.dropped_sink:,}, shutdown {stats.dropped_shutdown:,}); {held}"
            )
        return None


def _leading(pending: _Pending, limit: int) -> bytes:
    """The partition's first pending lines, joined up to `limit` bytes (one piece at least), as its first piece."""
    lines, pieces, size = pending.lines, 1, len(pending.lines[0])
    while pieces < len(lines) and size + len(lines[pieces]) <= limit:
        size += len(lines[pieces])
        pieces += 1
    if pieces > 1:
        lines[:pieces] = [b"".join(lines[:pieces])]
    return lines[0]


def _name(fn: Subscriber) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _without_rationale(review: Review) -> Review:
    """A review as the log keeps it: its status, score and reason, not the reviewer's free text.

    NOTE: the rationale is the model's prose and may quote the payment's note (the user's own
    words); the log is immutable for its retention, so it keeps none. The rationale stays on
    `GET /api/reviews/{event_id}` for REVIEW_TTL_S (docs/security.md, "Records")."""
    return msgspec.structs.replace(review, rationale="")
