"""Shadow scoring: a model's shadow version scores each event after its answer is sent.

    offer(record, shadow)     on the response path: one bounded append (past `shadow_queue`, 10,000:
                              dropped, counted, and the record passed on unshadowed)
    run()                     the background job: up to 64 queued events at a time (or what
                              WINDOW_S gathered), grouped by shadow version, scored in one
                              model run (past the prediction cache), decided by the shadow
                              version's thresholds, compared, then emitted

A shadow never touches an answer: it runs on rows already scored, after the fact, and its
failures are counted, never raised. Every offered record is emitted exactly once, with its
shadow score when it got one (`record.shadow`), so a slow or broken shadow never loses a record.
This object alone owns the queue and the per-version counts (ShadowView).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from shared.domain.answers import ShadowView
from shared.domain.records import DecisionRecord, Shadowed
from shared.domain.spec import Thresholds
from shared.models.served import LoadedModel
from shared.policies import RolloutPolicy
from shared.runtime.batching.rows import split_rows, stack_rows
from shared.telemetry import metrics

__all__ = ["TAKE", "ShadowScorer"]

log = logging.getLogger(__name__)

TAKE = 64  # queued events scored together at most
# how long the job lets a batch fill before scoring fewer than TAKE. no answer waits for
# it, so it is set by the cost of a batch, not by latency: a batch's fixed cost (wake-up,
# stacking, the model call) is shared by what it holds; at 5 ms, 35 events a batch in
# bench.inprocess (~15 expected at 3,000 events/s) and 11.3 µs of shadow CPU an event; at 20 ms,
# 63.5 and 9.3 µs (same run, alternating). A batch fills to TAKE from 3,200 events/s
WINDOW_S = 0.02
Emit = Callable[[DecisionRecord], None]
Queued = tuple[DecisionRecord, LoadedModel]
Layout = npt.NDArray[np.intp] | None  # where the shadow's features sit in the live row (None: the same row)


class _Tally:
    """What one shadow version said, on this replica."""

    __slots__ = ("agreed", "difference", "dropped", "failed", "scored")

    def __init__(self) -> None:
        self.scored = self.agreed = self.dropped = self.failed = 0
        self.difference = 0.0  # the sum of |shadow score - live score|


class _Run:
    """One batch's counts for one model, sent to the metrics at once."""

    __slots__ = ("agreed", "differences", "failed")

    def __init__(self) -> None:
        self.agreed = self.failed = 0
        self.differences: list[float] = []

    def emit(self, model: str, version: str) -> None:
        disagreed = len(self.differences) - self.agreed
        metrics.shadow_many(model, version, self.agreed, disagreed, self.failed, np.array(self.differences))


class ShadowScorer:
    """Scores queued records with their shadow version, off the response path, then emits them."""

    def __init__(self, policy: RolloutPolicy, emit: Emit | None) -> None:
        self._limit = policy.shadow_queue
        self._emit = emit
        self._queue: deque[Queued] = deque()
        self._ready: asyncio.Event | None = None  # NOTE: made in the running loop (`run`)
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._layouts: dict[tuple[int, int], tuple[Sequence[str], LoadedModel, Layout | str]] = {}
        self._closed = False

    def offer(self, record: DecisionRecord, shadow: LoadedModel) -> None:
        """Queue `record` for `shadow` (O(1)); with the queue full, pass it on unshadowed."""
        if len(self._queue) >= self._limit or self._closed:
            self._tally(record.model, shadow.version).dropped += 1
            metrics.shadow(record.model, shadow.version, "dropped")
            self._pass_on(record)
            return
        self._queue.append((record, shadow))
        ready = self._ready
        if ready is not None and not ready.is_set():
            ready.set()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def view(self, name: str, version: str) -> ShadowView:
        """How `version`, shadowing `name`, compares with the live answers on this replica."""
        tally = self._tallies.get((name, version)) or _Tally()
        scored = tally.scored
        return ShadowView(
            version,
            scored,
            tally.agreed,
            round(tally.agreed / scored, 6) if scored else None,
            round(tally.difference / scored, 6) if scored else None,
            tally.dropped,
            tally.failed,
        )

    async def run(self) -> None:
        """Score what is queued as it comes, until cancelled."""
        if self._ready is None:
            self._ready = asyncio.Event()
        while True:
            if not self._queue:
                self._ready.clear()
                await self._ready.wait()
            if len(self._queue) < TAKE:
                # a window, as the batcher's but longer (no answer waits for it): woken per
                # event, the job ran a model call per handful of rows, and that cost ~4 µs an event
                await asyncio.sleep(WINDOW_S)
            await self._score_next()
            await asyncio.sleep(0)  # NOTE: settling a batch holds the loop: let answers through

    async def aclose(self, within_s: float = 1.0) -> None:
        """Score what is queued for at most `within_s`, then emit the rest unshadowed."""
        self._closed = True
        try:
            async with asyncio.timeout(within_s):
                while self._queue:
                    await self._score_next()
        except TimeoutError:
            log.warning("shadow scoring stopped at close: %d records emitted without it", len(self._queue))
        while self._queue:
            self._pass_on(self._queue.popleft()[0])

    # -- scoring ------------------------------------------------------------------------------

    async def _score_next(self) -> None:
        """Score up to TAKE queued records, one model call per shadow version; emit each once."""
        taken = [self._queue.popleft() for _ in range(min(TAKE, len(self._queue)))]
        groups: dict[int, list[Queued]] = {}
        for item in taken:
            groups.setdefault(id(item[1]), []).append(item)
        waiting = list(groups.values())
        try:
            while waiting:
                group = waiting[0]
                shadow, records = group[0][1], [record for record, _ in group]
                outcomes = await self._score(shadow, records)
                waiting.pop(0)
                self._settle(shadow, records, outcomes)
        finally:
            # NOTE: cancelled mid-way (shutdown): what was not emitted goes back, first in line
            self._queue.extendleft(item for group in reversed(waiting) for item in reversed(group))

    async def _score(self, shadow: LoadedModel, records: list[DecisionRecord]) -> list[float | str]:
        """A score per record, or why there is none."""
        columns = records[0].columns
        layout = self._layout(columns, shadow)
        if layout is None and all(r.columns is columns for r in records):
            return await _scores(shadow, [r.row for r in records])  # the usual case: the live row as it is
        outcomes: list[float | str] = []
        rows: list[npt.NDArray[np.float32]] = []
        slots: list[int] = []
        for record in records:
            if record.columns is not columns:  # a layout per run of records sharing their columns
                columns, layout = record.columns, self._layout(record.columns, shadow)
            if isinstance(layout, str):
                outcomes.append(layout)
                continue
            slots.append(len(outcomes))
            outcomes.append("")
            rows.append(record.row if layout is None else record.row[layout])
        if not rows:
            return outcomes
        for slot, score in zip(slots, await _scores(shadow, rows), strict=True):
            outcomes[slot] = score
        return outcomes

    def _settle(self, shadow: LoadedModel, records: list[DecisionRecord], outcomes: list[float | str]) -> None:
        """Give each record its shadow's say, count it, and pass it on (the lookups and the metrics
        once for the lot: a metric per record was a tenth of the shadow's CPU)."""
        version, thresholds = shadow.version, shadow.spec.thresholds
        decide, model, tally = thresholds.decide, None, _Tally()
        run = _Run()  # the metrics of a run of one model's records
        for record, outcome in zip(records, outcomes, strict=True):
            if record.model != model or model is None:
                if model is not None:
                    run.emit(model, version)
                model, tally, run = record.model, self._tally(record.model, version), _Run()
            if isinstance(outcome, str):
                tally.failed += 1
                run.failed += 1
                record.shadow = Shadowed(version, None, None, outcome)
            else:
                decision = decide(outcome)
                difference = abs(outcome - record.score)
                agreed = decision == (record.decision or _decided(record, thresholds))
                tally.scored += 1
                tally.agreed += agreed
                tally.difference += difference
                run.agreed += agreed
                run.differences.append(difference)
                record.shadow = Shadowed(version, outcome, decision)
            self._pass_on(record)
        if model is not None:
            run.emit(model, version)

    def _layout(self, columns: Sequence[str], shadow: LoadedModel) -> Layout | str:
        """Where the shadow's features sit in the live row: None (the same), indices, or why it cannot score."""
        key = (id(columns), id(shadow))
        known = self._layouts.get(key)
        if known is not None and known[0] is columns and known[1] is shadow:
            return known[2]
        wanted = [f.name for f in shadow.spec.features]
        layout: Layout | str
        if list(columns) == wanted:
            layout = None
        elif missing := [f for f in wanted if f not in columns]:
            layout = f"the shadow version takes features the live row lacks: {', '.join(missing[:10])}"
        else:
            at = {name: i for i, name in enumerate(columns)}
            layout = np.array([at[f] for f in wanted], dtype=np.intp)
        if len(self._layouts) > 256:  # versions come and go; a few live at a time
            self._layouts.clear()
        self._layouts[key] = (columns, shadow, layout)
        return layout

    def _tally(self, name: str, version: str) -> _Tally:
        tally = self._tallies.get((name, version))
        if tally is None:
            tally = self._tallies[name, version] = _Tally()
        return tally

    def _pass_on(self, record: DecisionRecord) -> None:
        if self._emit is None:
            return
        try:
            self._emit(record)
        except Exception:  # NOTE: the log's bug must not stop shadow scoring nor reach an answer
            log.exception("emitting a decision record failed")


async def _scores(shadow: LoadedModel, rows: list[npt.NDArray[np.float32]]) -> list[float | str]:
    """The rows scored by one model run, past the prediction cache: a shadow's rows are its
    own and never asked again (they cost an L1 store each, and pushed the live version's
    entries out). In a worker thread, whatever the version's `inline`: no answer waits for a
    shadow, one hop (~20 µs of the loop) carries up to TAKE rows (~1 µs each), and ONNX Runtime
    releases the GIL while it runs, so the loop serves requests meanwhile."""
    # a shadow's failure of any kind (a retired version, a run that fails, a row that does
    # not fit) is that record's outcome, never an exception out of the job
    if shadow.model.released:
        return ["BatcherClosed: the shadow version was retired"] * len(rows)
    matrix = stack_rows(rows)
    try:
        scores = await asyncio.to_thread(shadow.model.predict, matrix)
        split_rows(scores, len(rows))  # the check that every row has its score
        found: list[float | str] = scores.tolist()  # the floats at once, not a float() per numpy scalar
        return found
    except Exception as exc:
        return [_why(exc)] * len(rows)


def _why(exc: BaseException) -> str:
    detail = getattr(exc, "detail", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {detail}"[:300]


def _decided(record: DecisionRecord, thresholds: Thresholds) -> str:
    """The live decision where the answer had none (V2 gives scores only): the live thresholds' (or the shadow's)."""
    if record.thresholds is not None:
        return record.thresholds.decide(record.score)
    return thresholds.decide(record.score)
