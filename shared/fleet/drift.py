"""Drift per model version: its latest records against its first ones, as population stability indices.

A background job hands `DriftMonitor.observe` the decision records in batches (never the
response path). Per (model, version):

    reference    the version's first DRIFT_REFERENCE records (rows and scores), frozen once
                 full, and only then is any PSI reported; one for the whole fleet (below)
    window       the last DRIFT_WINDOW records, whichever they are (right after the reference
                 fills, the two overlap and the PSI starts near 0)

NOTE: the reference is the version's own first traffic, not its golden rows: those are a
handful of hand-picked rows that prove the file scores as its author expected, not a sample
of the population it will see. The first records are that population, as the first replica
to fill the reference saw it, at the moment the version went live.

Binning, per column (every feature, and the score), from the reference alone:

    discrete     at most DRIFT_BINS distinct values in the reference (one-hot indicators: 0/1;
                 a constant default): one bin per distinct value, plus an `other` bin for any
                 value the reference never held (a constant column that starts to vary shows)
    continuous   DRIFT_BINS quantile bins: the reference's quantiles at 1/B .. (B-1)/B are the
                 cut points (repeated ones merged), each bin right-closed, (c[i-1], c[i]], the
                 outer ones open to -inf and +inf

The index, with E_i the reference's share of bin i and A_i the window's:

    PSI = Σ_i (A_i' - E_i') · ln(A_i' / E_i'),   p' = max(p, EPSILON),   EPSILON = 1e-4

the textbook PSI, with an empty bin's share clipped to 0.01% so that its logarithm is finite:
a bin empty on both sides adds exactly 0; a bin holding 10% of the window that the reference
never saw adds (0.1 - 1e-4)·ln(0.1 / 1e-4) ≈ 0.69. Usual reading: < 0.1 stable, 0.1-0.25 a
moderate shift, > 0.25 a large one. The same distribution sampled twice is not 0: with B
bins, R reference and W window records, its expectation is about (B - 1)(1/R + 1/W) (0.018 at
the defaults).

Cost: the window holds each record's bin per column (uint8) and a running count per bin,
updated as records arrive and leave, so a recompute is one PSI over (features + 1) * (B + 1)
counts; it runs once per version per `observe` call (per batch: the caller's batching sets the
pace; the metrics are set then). Assigning bins is one vectorised comparison per batch
(n * columns * B). Measured at 25 features, B = 10, on a 2-core development machine: 1.3 µs
per record observed in batches of 1000 (1.6 in batches of 100, 6 in batches of 10), the
recompute included; the recompute alone (26 PSIs, 51 gauges set) 17 µs.

One reference per fleet. With a control store (Redis), a version's frozen reference is shared
(shared/fleet/references.py: the key, the shape, first writer wins):

    first sight of a version    look it up: a reference found is adopted at once (a restart,
                                or a replica that scaled out later), before this one builds its own
    this replica's fills        publish it; one that loses the race adopts the winner's
    adopting                    the published bins and counts replace this replica's; the rows it
                                had collected for its own become its window (or, once frozen, its
                                window starts again: its bins were this replica's)

so every replica's PSI is against the same reference. One that cannot be shared or used (too
large, not describing the version) leaves the replica on its own. With the control store
unreachable the replica keeps its own reference, logs a warning once per version, says so in
`describe` (`reference`: "local: control store down") and asks again every RETRY_S; drift never
fails a record, nor scoring. The exchange with the store runs in `run` (a background job),
never inside `observe`.

One owner: call `observe`, `describe`, `forget` and `exchange` from one thread (the event
loop's); an `observe` of a batch of 1000 records holds it for about 1.3 ms.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.answers import DriftView
from shared.domain.records import DecisionRecord
from shared.errors import ControlStoreDown
from shared.fleet.keys import SharedReference, reference_key
from shared.fleet.references import Unshareable, checked, settle
from shared.policies import DriftPolicy
from shared.stores.control import ControlStore
from shared.telemetry import metrics

__all__ = [
    "CATCH_UP",
    "CATCH_UP_S",
    "EPSILON",
    "RETRY_S",
    "SCORE",
    "DriftMonitor",
    "population_stability",
]

log = logging.getLogger(__name__)

EPSILON = 1e-4  # the share an empty bin counts as (see the module docstring)
SCORE = "score"  # the `feature` the score's PSI is reported under

RETRY_S = 60.0  # a replica on its own reference because the store was down asks again this often

Counts = npt.NDArray[np.int64]
Rows = npt.NDArray[Any]  # a ring's rows: bins (uint8) or defaulted flags (bool)


def population_stability(reference: Counts, window: Counts) -> npt.NDArray[np.float64]:
    """PSI of each row of `window` counts against the same row of `reference` counts (bins on the last axis)."""
    expected = np.maximum(reference / np.maximum(reference.sum(axis=-1, keepdims=True), 1), EPSILON)
    actual = np.maximum(window / np.maximum(window.sum(axis=-1, keepdims=True), 1), EPSILON)
    psi: npt.NDArray[np.float64] = ((actual - expected) * np.log(actual / expected)).sum(axis=-1)
    return psi


class _Bins:
    """Each column's bins, drawn from the reference: by value when few, else by its quantiles."""

    def __init__(self, width: int, bins: int) -> None:
        self.bins = bins
        self.slots = bins + 1  # B quantile bins, or up to B values and `other`
        self.cuts = np.full((width, bins - 1), np.inf)  # continuous columns; +inf pads: nothing is above it
        self.values = np.full((width, bins), np.nan)  # discrete columns; NaN pads: nothing equals it
        self.is_discrete = np.zeros(width, dtype=bool)
        self.offsets = np.arange(width) * self.slots
        self._index()

    def _index(self) -> None:
        self.discrete = np.flatnonzero(self.is_discrete)
        self.continuous = np.flatnonzero(~self.is_discrete)

    @classmethod
    def drawn(cls, reference: npt.NDArray[np.float64], bins: int) -> _Bins:
        """The bins of `reference`'s columns."""
        self = cls(reference.shape[1], bins)
        for j in range(reference.shape[1]):  # once per version, when its reference fills
            distinct = np.unique(reference[:, j])
            if len(distinct) <= bins:
                self.is_discrete[j] = True
                self.values[j, : len(distinct)] = distinct
            else:
                cuts = np.unique(np.quantile(reference[:, j], np.linspace(0.0, 1.0, bins + 1)[1:-1]))
                self.cuts[j, : len(cuts)] = cuts
        self._index()
        return self

    @classmethod
    def shared(cls, reference: SharedReference) -> _Bins:
        """The bins a shared reference describes; ValueError when it describes none."""
        self = cls(len(reference.columns), reference.bins)
        for j, (cuts, values) in enumerate(zip(reference.cuts, reference.values, strict=True)):
            if values is not None:
                self.is_discrete[j] = True
                self.values[j, : len(values)] = values  # NOTE: more than `bins` raises here
            else:
                self.cuts[j, : len(cuts)] = cuts
        self._index()
        return self

    def parts(self) -> tuple[list[list[float]], list[list[float] | None]]:
        """Each column's cut points and distinct values, as `SharedReference` holds them."""
        cuts: list[list[float]] = []
        values: list[list[float] | None] = []
        for j, discrete in enumerate(self.is_discrete.tolist()):
            row = self.values[j] if discrete else self.cuts[j]
            held = row[np.isfinite(row)].tolist()  # the padding (NaN, +inf) dropped
            cuts.append([] if discrete else held)
            values.append(held if discrete else None)
        return cuts, values

    def assign(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
        """The bin of each value (rows: records, columns: the version's columns)."""
        out = np.empty(values.shape, dtype=np.uint8)
        c, d = self.continuous, self.discrete
        if len(c):  # cut points below a value = its bin; a value on a cut goes below it
            out[:, c] = (values[:, c, None] > self.cuts[None, c, :]).sum(axis=2)
        if len(d):
            same = values[:, d, None] == self.values[None, d, :]
            out[:, d] = np.where(same.any(axis=2), same.argmax(axis=2), self.slots - 1)
        return out

    def count(self, assigned: npt.NDArray[np.uint8]) -> Counts:
        """Records per (column, bin)."""
        flat = (assigned + self.offsets).ravel()
        counts: Counts = np.bincount(flat, minlength=len(self.offsets) * self.slots)
        return counts.reshape(-1, self.slots)


def _column_sums(rows: Rows) -> Counts:
    sums: Counts = rows.sum(axis=0, dtype=np.int64)
    return sums


class _Ring:
    """The last `size` records' rows of something, with a running total kept as they come and go."""

    def __init__(self, size: int, width: int, dtype: type[np.generic], tally: Callable[[Rows], Counts]) -> None:
        self.rows: Rows = np.zeros((size, width), dtype=dtype)
        self.tally = tally
        self.total = tally(self.rows[:0])
        self.held = 0
        self.at = 0  # the next slot written; equal to `held` until the ring is full

    def push(self, rows: Rows) -> None:
        size = len(self.rows)
        if len(rows) >= size:
            self.rows[:] = rows[-size:]
            self.total, self.held, self.at = self.tally(self.rows), size, 0
            return
        slots = (self.at + np.arange(len(rows))) % size
        evicted = slots[slots < self.held]  # slots that hold a record (every slot, once full)
        if len(evicted):
            self.total -= self.tally(self.rows[evicted])
        self.rows[slots] = rows
        self.total += self.tally(rows)
        self.at = (self.at + len(rows)) % size
        self.held = min(self.held + len(rows), size)


class _Version:
    """One version's reference, window and latest figures."""

    def __init__(self, columns: Sequence[str], policy: DriftPolicy) -> None:
        self.columns = columns
        self.names = (*columns, SCORE)
        self.index = {name: j for j, name in enumerate(columns)}
        self.reference = np.empty((policy.reference, len(self.names)), dtype=np.float64)
        self.referenced = 0
        # once the reference is full: its bins, its counts per (column, bin), the window's bins
        self.frozen: tuple[_Bins, Counts, _Ring] | None = None
        self.defaulted = _Ring(policy.window, len(columns), np.bool_, _column_sums)
        self.psi: npt.NDArray[np.float64] | None = None
        self.policy = policy
        self.fingerprint = ""  # the first record's: with model and version, the shared reference's key
        self.origin = "local"  # where the reference is from: `local`, `fleet`, or `local: <why not the fleet's>`
        self._shared: SharedReference | None = None  # the frozen reference as shared (built once, or adopted)

    def takes(self, record: DecisionRecord) -> bool:
        return record.columns is self.columns or tuple(record.columns) == tuple(self.columns)

    def add(self, records: list[DecisionRecord]) -> bool:
        """Take a batch of this version's records, then recompute its figures; whether the
        reference froze with it (it can then be shared)."""
        values = np.empty((len(records), len(self.names)), dtype=np.float64)
        # np.array, not np.stack (Python around each row: three times the cost); rows of
        # unequal width raise here as they did there
        values[:, :-1] = np.array([r.row for r in records])
        values[:, -1] = [r.score for r in records]
        defaulted = np.zeros((len(records), len(self.columns)), dtype=np.bool_)
        for i, record in enumerate(records):
            for name in record.defaulted:  # usually none
                j = self.index.get(name)
                if j is not None:
                    defaulted[i, j] = True
        self.defaulted.push(defaulted)
        froze = False
        if self.frozen is None:
            taken = min(len(values), len(self.reference) - self.referenced)
            self.reference[self.referenced : self.referenced + taken] = values[:taken]
            self.referenced += taken
            if self.referenced < len(self.reference):
                return False
            self.frozen, froze = self._freeze(), True
            values = values[taken:]
        bins, baseline, window = self.frozen
        window.push(bins.assign(values))
        self.psi = population_stability(baseline, window.total)
        return froze

    def _freeze(self) -> tuple[_Bins, Counts, _Ring]:
        """The reference is full: its bins, its counts, and the window in its bins (its latest records)."""
        bins = _Bins.drawn(self.reference, self.policy.bins)
        assigned = bins.assign(self.reference)
        window = _Ring(self.policy.window, len(self.names), np.uint8, bins.count)
        window.push(assigned[-self.policy.window :])
        self.reference = self.reference[:0]  # the counts are all that is needed from here on
        return bins, bins.count(assigned), window

    def shared(self, replica: str) -> SharedReference | None:
        """The frozen reference as the fleet shares it (None until it is frozen): the adopted one
        as it was published, or this replica's own, described once."""
        if self._shared is None and self.frozen is not None:
            bins, baseline, _ = self.frozen
            cuts, values = bins.parts()
            self._shared = SharedReference(
                list(self.names), bins.bins, self.referenced, cuts, values, baseline.tolist(), replica, time.time()
            )
        return self._shared

    def adopt(self, reference: SharedReference) -> None:
        """Take the fleet's reference instead of this replica's; `Unshareable` (nothing changed)
        when it does not describe this version."""
        bins, baseline = _Bins.shared(checked(reference, self.names)), np.array(reference.counts, dtype=np.int64)
        window = _Ring(self.policy.window, len(self.names), np.uint8, bins.count)
        if self.frozen is None and self.referenced:  # the rows collected for its own become its window
            window.push(bins.assign(self.reference[: self.referenced][-self.policy.window :]))
        self.frozen = (bins, baseline, window)
        self.reference = self.reference[:0]
        self.referenced = reference.records
        self.psi = population_stability(baseline, window.total) if window.held else None
        self.origin, self._shared = "fleet", reference

    def shares(self) -> npt.NDArray[np.float64]:
        return self.defaulted.total / max(self.defaulted.held, 1)

    def report(self, model: str, version: str) -> None:
        for name, share in zip(self.columns, self.shares().tolist(), strict=True):
            metrics.drift_defaulted(model, version, name, share)
        if self.psi is not None:
            for name, psi in zip(self.names, self.psi.tolist(), strict=True):
                metrics.drift_psi(model, version, name, psi)

    def view(self, version: str) -> DriftView:
        psi = {} if self.psi is None else {n: round(p, 4) for n, p in zip(self.names, self.psi.tolist(), strict=True)}
        shares = {n: round(s, 4) for n, s in zip(self.columns, self.shares().tolist(), strict=True)}
        return DriftView(version, self.referenced, self.defaulted.held, psi, shares, self.origin)


CATCH_UP = 256  # records taken before they are counted (or CATCH_UP_S, whichever first): ~0.4 ms of the loop
CATCH_UP_S = 1.0


class DriftMonitor:
    """Drift of every version this replica scores with, from its decision records, against the
    fleet's reference of each (shared through `control`; None: this replica's own)."""

    def __init__(self, policy: DriftPolicy, control: ControlStore | None = None, *, replica: str = "") -> None:
        self.policy = policy
        self._control = control
        self._replica = replica
        self._asks: deque[tuple[str, str]] = deque()  # versions whose reference to look up or publish
        self._wake: asyncio.Event | None = None
        self._versions: dict[tuple[str, str], _Version] = {}  # in the order first seen
        self._pending: list[DecisionRecord] = []
        self._caught_up = 0.0  # monotonic time of the last catch-up
        self._every = max(1, round(1 / policy.sample))  # DRIFT_SAMPLE: every k-th record counts
        self._next = 0  # where the next batch's first counted record is

    def observe(self, records: Sequence[DecisionRecord]) -> None:
        """Take a batch of records (any models and versions, in the order decided). They are
        counted in batches of at least CATCH_UP records, or at least every CATCH_UP_S (and
        before every `describe`): at the log's batches of 64, a recompute per batch cost twice
        as much per record as one per 1,000 (1.1 µs); 1,000 at once held the loop 1.1 ms, which
        the p99 at 16 connections showed (docs/benchmark.md)."""
        if not self.policy.reference:
            return  # DRIFT_REFERENCE=0: no drift
        every = self._every
        if every == 1:
            self._pending.extend(records)
        else:  # a slice: the records not counted cost nothing
            self._pending.extend(records[self._next :: every])
            self._next = (self._next - len(records)) % every
        if len(self._pending) >= CATCH_UP or time.monotonic() - self._caught_up >= CATCH_UP_S:
            self.catch_up()

    def catch_up(self) -> None:
        """Count the records taken so far; recompute each version's PSI and defaulted shares; set their metrics."""
        records, self._pending, self._caught_up = self._pending, [], time.monotonic()
        batches: dict[tuple[str, str], list[DecisionRecord]] = {}
        for record in records:
            batches.setdefault((record.model, record.version), []).append(record)
        for key, batch in batches.items():
            state = self._versions.get(key)
            if state is None:
                state = self._versions[key] = _Version(batch[0].columns, self.policy)
                state.fingerprint = batch[0].fingerprint
                self._ask(key)  # the fleet may hold its reference already
            taken = [r for r in batch if state.takes(r)]  # a version's columns never change
            if taken:
                if state.add(taken) and state.origin != "fleet":
                    self._ask(key)  # its own is full: publish it, or adopt the winner's
                state.report(*key)

    # -- the fleet's reference (a background job: never inside `observe`) ----------------------

    def _ask(self, key: tuple[str, str]) -> None:
        if self._control is not None:
            self._asks.append(key)
            if self._wake is not None:
                self._wake.set()

    async def run(self) -> None:
        """The background job: exchange references with the control store as versions come and
        fill; every RETRY_S, ask again for the versions it could not reach the store for."""
        wake = self._wake = asyncio.Event()  # NOTE: made inside the running loop
        while True:
            if not self._asks:  # asks made before this job started are not waited for
                try:
                    async with asyncio.timeout(RETRY_S):
                        await wake.wait()
                except TimeoutError:
                    self._asks.extend(k for k, s in self._versions.items() if s.origin.startswith("local: control"))
            wake.clear()
            await self.exchange()

    async def exchange(self) -> None:
        """Look up or publish the reference of each version asked for; adopt the fleet's when it has one."""
        while self._asks and self._control is not None:
            key = self._asks.popleft()
            state = self._versions.get(key)
            if state is None or state.origin == "fleet":
                continue  # forgotten meanwhile, or settled by an earlier ask
            try:
                await self._exchange(self._control, key, state)
            except ControlStoreDown as exc:
                self._unreachable(key, state, exc)

    async def _exchange(self, control: ControlStore, key: tuple[str, str], state: _Version) -> None:
        own = state.shared(self._replica)
        try:
            fleet = await settle(control, reference_key(*key, state.fingerprint), own)
            if fleet is None:
                state.origin = "local"  # none published yet: this replica's, published once it fills
            elif fleet is own:
                state.origin = "fleet"
                log.info("drift: %s/%s: this replica's reference is the fleet's", *key)
            else:
                state.adopt(fleet)
                log.info("drift: %s/%s adopts the fleet's reference (built by %s)", *key, fleet.replica or "?")
                state.report(*key)
        except Unshareable as exc:
            self._kept(key, state, f"local: {exc}")

    def _kept(self, key: tuple[str, str], state: _Version, why: str) -> None:
        if state.origin != why:
            log.warning("drift: %s/%s keeps this replica's own reference (%s)", *key, why)
        state.origin = why

    def _unreachable(self, key: tuple[str, str], state: _Version, exc: ControlStoreDown) -> None:
        """The store is down: this replica's own reference, said once per version, asked again later."""
        why = "local: control store down"
        if state.origin != why:
            log.warning(
                "drift: %s/%s keeps this replica's own reference: its PSI may differ from other replicas' "
                "until the control store answers (%s)",
                *key,
                exc.detail,
            )
        state.origin = why

    def reference(self, name: str, version: str) -> SharedReference | None:
        """The reference `version` of `name` is measured against, as the fleet shares it (None until frozen)."""
        if self._pending:
            self.catch_up()
        state = self._versions.get((name, version))
        return None if state is None else state.shared(self._replica)

    def describe(self, name: str) -> list[DriftView]:
        """The drift of each version of `name` seen on this replica, newest last."""
        if self._pending:
            self.catch_up()
        return [state.view(version) for (model, version), state in self._versions.items() if model == name]

    def forget(self, name: str, version: str) -> None:
        """Drop a retired version: its state and its series (a retired version's gauges would alert forever)."""
        self._pending = [r for r in self._pending if (r.model, r.version) != (name, version)]
        if self._versions.pop((name, version), None) is None:
            return
        metrics.drift_forget(name, version)
