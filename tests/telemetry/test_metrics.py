"""The stage histograms fed in bulk give what recording one event at a time gave.

`metrics.stages` appends an event's timings and `metrics.fold` records them in bulk (numpy's
`searchsorted` and `bincount`); `_stages_now` is the one-event-at-a-time recording it replaced.
Each test below runs both on the same timings and compares the histograms they leave.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.telemetry import metrics
from shared.telemetry.metrics import STAGE_DURATION, Series

BOUNDS = STAGE_DURATION.spec.buckets
ROW_STAGES = ("parse", "features", "cache", "queue", "inference", "total")
# NOTE: durations in ms; the buckets' own bounds (in ms) are drawn on purpose: bisect_left puts a
# value equal to a bound in the bucket below it, and searchsorted must do the same
durations = st.one_of(
    st.floats(min_value=0.0, max_value=60_000.0, allow_nan=False),
    st.sampled_from([b * 1000.0 for b in BOUNDS]),
    st.just(0.0),
)
timings_ms = st.fixed_dictionaries({stage: durations for stage in ROW_STAGES})


def snapshot() -> dict[str, tuple[list[int], int, float, float]]:
    """Every stage series' (bucket counts, count, sum, window max), pending timings folded first."""
    metrics.fold()
    return {
        stage: (list(s.counts), s.count, s.sum, s.window_max)
        for stage, s in ((stage, STAGE_DURATION.series((stage,))) for stage in metrics.STAGES)
    }


def added(before: dict[str, tuple[list[int], int, float, float]]) -> dict[str, tuple[list[int], int, float]]:
    after = snapshot()
    return {
        stage: ([a - b for a, b in zip(after[stage][0], before[stage][0], strict=True)],
                after[stage][1] - before[stage][1], after[stage][2] - before[stage][2])
        for stage in after
    }  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False) | st.sampled_from(BOUNDS), max_size=300))
def test_record_many_is_record_one_at_a_time(values: list[float]) -> None:
    one, bulk = Series(BOUNDS), Series(BOUNDS)
    for v in values:
        one.record(v)
    bulk.record_many(np.array(values, dtype=np.float64))
    assert bulk.counts == one.counts
    assert bulk.count == one.count
    assert bulk.window_max == one.window_max
    assert np.isclose(bulk.sum, one.sum, rtol=1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(timings_ms, min_size=1, max_size=2 * metrics.FOLD_EVENTS + 7))
def test_stages_folded_equal_stages_recorded_one_at_a_time(events: list[dict[str, float]]) -> None:
    before = snapshot()
    for each in events:
        metrics._stages_now(each, 1)
    one = added(before)
    before = snapshot()
    for each in events:
        metrics.stages(each)
    bulk = added(before)
    for stage in metrics.STAGES:
        assert bulk[stage][0] == one[stage][0], stage
        assert bulk[stage][1] == one[stage][1] == (len(events) if stage in ROW_STAGES else 0)
        # NOTE: each side is a difference of two running totals (the process keeps one across examples), which
        # loses ~eps x the total: a nanosecond, far below any event a fold could drop or double
        assert np.isclose(bulk[stage][2], one[stage][2], rtol=1e-9, atol=1e-9)


def test_a_reviews_wait_is_recorded_once_beside_the_six() -> None:
    waited: Mapping[str, float] = {**dict.fromkeys(ROW_STAGES, 1.0), "llm": 250.0}
    plain: Mapping[str, float] = dict.fromkeys(ROW_STAGES, 1.0)
    before = snapshot()
    for each in (plain, waited, plain):
        metrics.stages(each)
    found = added(before)
    assert found["llm"][1] == 1
    assert abs(found["llm"][2] - 0.25) < 1e-12
    assert all(found[stage][1] == 3 for stage in ROW_STAGES)


def test_timings_other_than_the_usual_six_are_recorded_one_at_a_time() -> None:
    partial = {"parse": 1.0, "total": 2.0}
    six_others = {**dict.fromkeys(ROW_STAGES[:5], 1.0), "llm": 4.0}  # six keys, "total" not among them
    before = snapshot()
    metrics.stages(dict.fromkeys(ROW_STAGES, 1.0))
    metrics.stages(partial)
    metrics.stages(six_others)
    found = added(before)
    assert found["parse"][1] == 3
    assert found["total"][1] == 2
    assert found["features"][1] == 2
    assert found["llm"][1] == 1


def test_a_batch_of_shared_timings_counts_each_event() -> None:
    before = snapshot()
    metrics.stages(dict.fromkeys(ROW_STAGES, 3.0), count=64)
    assert all(added(before)[stage][1] == 64 for stage in ROW_STAGES)


def test_a_reader_sees_what_is_pending() -> None:
    metrics.fold()
    series = STAGE_DURATION.series(("parse",))
    count = series.count
    metrics.stages(dict.fromkeys(ROW_STAGES, 1.0))
    assert series.count == count  # pending: not folded yet
    list(metrics.instruments())  # what the bridge calls on every collection
    assert series.count == count + 1


def test_no_event_is_lost_or_counted_twice_when_another_thread_folds() -> None:
    """Azure Monitor's exporter collects (and folds) on its own thread while the loop appends."""
    series = STAGE_DURATION.series(("total",))
    before = snapshot()["total"][1]
    stop = threading.Event()

    def collector() -> None:
        while not stop.is_set():
            metrics.fold()

    threads = [threading.Thread(target=collector) for _ in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # NOTE: the GIL changes hands between almost any two bytecodes
    try:
        for t in threads:
            t.start()
        timings = dict.fromkeys(ROW_STAGES, 0.5)
        for _ in range(50_000):
            metrics.stages(timings)
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(interval)
    metrics.fold()
    assert series.count - before == 50_000
