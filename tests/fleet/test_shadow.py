"""Shadow scoring after the answer: real tiny models, a bounded queue, every record emitted once."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest

from shared.domain.records import DecisionRecord
from shared.domain.spec import FeatureDef, Thresholds
from shared.fleet.shadow import ShadowScorer
from shared.models.onnx import OnnxModel
from shared.models.served import LoadedModel
from shared.settings import BatchPolicy, OrtOptions, RolloutPolicy
from shared.telemetry import metrics
from tests.conftest import LoopTurns
from tests.onnx_models import DEFAULT_FEATURES, make_model

COLUMNS = tuple(f.name for f in DEFAULT_FEATURES)
POLICY = BatchPolicy(window_ms=5, max_size=8)


class SlowModel(OnnxModel):
    """A real session whose every run takes `delay_s` more (a slow shadow version)."""

    delay_s = 0.2

    def predict(self, matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        time.sleep(self.delay_s)
        return super().predict(matrix)


@dataclass
class Log:
    """An `emit` that keeps what it is given."""

    records: list[DecisionRecord] = field(default_factory=list)

    def __call__(self, record: DecisionRecord) -> None:
        self.records.append(record)


Versions = Callable[..., LoadedModel]


@pytest.fixture
async def versions() -> AsyncIterator[Versions]:
    """`versions("2", bias=1.0, slow=False, features=...)`: a served version, retired after the test."""
    made: list[LoadedModel] = []

    def make(version: str, *, bias: float = 0.0, slow: bool = False, **model: object) -> LoadedModel:
        kind = SlowModel if slow else OnnxModel
        onnx = kind.load(make_model(bias=bias, **model), OrtOptions())  # type: ignore[arg-type]
        loaded = LoadedModel("fraud", version, onnx, POLICY, inline=not slow)
        made.append(loaded)
        return loaded

    yield make
    for loaded in made:
        await loaded.retire()


@pytest.fixture
async def scorer() -> AsyncIterator[tuple[ShadowScorer, Log]]:
    """A scorer (shadow_queue=100) running in the background, and what it emitted."""
    log = Log()
    shadow = ShadowScorer(RolloutPolicy(shadow_queue=100), log)
    job = asyncio.create_task(shadow.run())
    yield shadow, log
    job.cancel()
    await asyncio.gather(job, return_exceptions=True)
    await shadow.aclose()


def record(event_id: str = "e1", *, score: float = 0.5, decision: str = "review", value: float = 0.0) -> DecisionRecord:
    """A live decision on a row of `value`s, as the core builds it on the response path."""
    row = np.full(len(COLUMNS), value, dtype=np.float32)
    return DecisionRecord(
        time.time(), "http", event_id, "fraud", "1", "f1", COLUMNS, row, {}, score, decision, "why", {}
    )


def counts(version: str) -> tuple[float, ...]:
    """The process's shadow metrics of fraud/`version`: agreed, disagreed, failed, differences and their sum."""
    events, series = metrics.SHADOW_EVENTS.values, metrics.SHADOW_DIFFERENCE.series(("fraud", version))
    found = (events.get(("fraud", version, outcome), 0) for outcome in ("agreed", "disagreed", "failed"))
    return (*found, series.count, series.sum)


async def until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "did not happen in time"
        await asyncio.sleep(0.005)


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


async def test_offer_returns_at_once_and_the_record_gets_its_shadow_score_later_once(
    scorer: tuple[ShadowScorer, Log], versions: Versions
) -> None:
    shadow, log = scorer
    slow = versions("2", bias=3.0, slow=True)  # every run sleeps 0.2 s, in a thread
    live = record(score=0.5, decision="review")
    started = time.perf_counter()
    shadow.offer(live, slow)
    offered_s = time.perf_counter() - started
    assert offered_s < 0.005 and live.shadow is None and not log.records
    await until(lambda: bool(log.records))
    assert log.records == [live]
    assert live.shadow is not None and live.shadow.version == "2" and live.shadow.error is None
    assert live.shadow.score == pytest.approx(sigmoid(3.0), abs=1e-6) and live.shadow.decision == "decline"
    await asyncio.sleep(0.3)
    assert log.records == [live]  # emitted once


async def test_a_shadow_version_run_inline_still_scores_off_the_loop(scorer: tuple[ShadowScorer, Log]) -> None:
    """No answer waits for a shadow: even a version whose answers run on the loop (`inline`)
    has its shadow runs in a worker thread, so the loop keeps serving while one runs."""
    shadow, log = scorer
    onnx = SlowModel.load(make_model(bias=3.0), OrtOptions())
    inline = LoadedModel("fraud", "2", onnx, POLICY, inline=True)
    try:
        async with LoopTurns() as loop:
            shadow.offer(record(), inline)
            await until(lambda: bool(log.records))
    finally:
        await inline.retire()
    assert log.records[0].shadow is not None and log.records[0].shadow.error is None
    assert loop.turns >= 10  # NOTE: the run sleeps 0.2 s; on the loop, it would have held every turn


async def test_a_full_queue_drops_counts_and_still_emits_the_record(versions: Versions) -> None:
    log = Log()
    shadow = ShadowScorer(RolloutPolicy(shadow_queue=2), log)
    version = versions("2")
    offered = [record(f"e{i}") for i in range(5)]
    for live in offered:
        shadow.offer(live, version)  # the job is not running: the queue fills
    assert log.records == offered[2:] and all(r.shadow is None for r in log.records)
    assert shadow.view("fraud", "2").dropped == 3
    job = asyncio.create_task(shadow.run())
    await until(lambda: len(log.records) == 5)
    job.cancel()
    await asyncio.gather(job, return_exceptions=True)
    assert sorted(r.event_id for r in log.records) == [f"e{i}" for i in range(5)]
    assert offered[0].shadow is not None and offered[0].shadow.score == pytest.approx(0.5)
    view = shadow.view("fraud", "2")
    assert (view.scored, view.dropped, view.failed) == (2, 3, 0)


async def test_agreement_and_the_mean_difference_are_counted_per_version(
    scorer: tuple[ShadowScorer, Log], versions: Versions
) -> None:
    shadow, log = scorer
    version = versions("2", bias=1.0)  # every zero row scores sigmoid(1) = 0.731: "review"
    counted = counts("2")
    lives = [record("a", score=0.6, decision="review"), record("b", score=0.9, decision="decline")]
    lives += [record(f"c{i}", score=0.7, decision="review") for i in range(2)]
    for live in lives:
        shadow.offer(live, version)
    await until(lambda: len(log.records) == 4)
    view = shadow.view("fraud", "2")
    assert (view.version, view.scored, view.agreed, view.agreement, view.failed) == ("2", 4, 3, 0.75, 0)
    expected = (abs(sigmoid(1) - 0.6) + abs(sigmoid(1) - 0.9) + 2 * abs(sigmoid(1) - 0.7)) / 4
    assert view.mean_abs_difference == pytest.approx(expected, abs=1e-5)
    assert shadow.view("fraud", "9").scored == 0 and shadow.view("fraud", "9").agreement is None
    # NOTE: the exported metrics say the same (counted a batch at a time, not a record at a time)
    agreed, disagreed, failed, differences, total = (
        now - before for now, before in zip(counts("2"), counted, strict=True)
    )
    assert (agreed, disagreed, failed, differences) == (3, 1, 0, 4)
    assert total == pytest.approx(4 * expected, abs=1e-5)


async def test_a_failing_shadow_is_counted_and_never_loses_the_record(
    scorer: tuple[ShadowScorer, Log], versions: Versions
) -> None:
    shadow, log = scorer
    broken = versions("2")
    await broken.retire()  # its session released: every run fails
    counted = counts("2")
    live = record()
    shadow.offer(live, broken)
    await until(lambda: bool(log.records))
    assert log.records == [live] and live.shadow is not None
    assert live.shadow.score is None and live.shadow.error
    assert shadow.view("fraud", "2").failed == 1 and live.score == 0.5 and live.decision == "review"
    assert [now - before for now, before in zip(counts("2"), counted, strict=True)][:4] == [0, 0, 1, 0]


async def test_a_shadow_taking_the_features_in_another_order_is_fed_by_name(
    scorer: tuple[ShadowScorer, Log], versions: Versions
) -> None:
    shadow, log = scorer
    reordered = versions("2", features=tuple(reversed(DEFAULT_FEATURES)))
    wider = versions("3", features=(*DEFAULT_FEATURES, FeatureDef("user_chargebacks_90d", 0.0)))
    same, other = record("same", value=1.0), record("other", value=1.0)
    same.row[0] = 2.0  # log_amount: weighed 0.1 by the live layout, 0.5 by the reversed one
    shadow.offer(same, reordered)
    shadow.offer(other, wider)
    await until(lambda: len(log.records) == 2)
    weights = np.linspace(0.1, 0.5, 4)  # the reordered model's weights, in its own order (log_amount last)
    expected = sigmoid(float(np.dot(weights, same.row[::-1])))  # 1.7, where the live order would give 1.1
    assert same.shadow is not None and same.shadow.score == pytest.approx(expected, abs=1e-5)
    assert other.shadow is not None and "user_chargebacks_90d" in (other.shadow.error or "")


async def test_a_record_without_a_decision_is_compared_under_the_live_thresholds(
    scorer: tuple[ShadowScorer, Log], versions: Versions
) -> None:
    shadow, log = scorer
    version = versions("2", bias=1.0)  # 0.731: "review" under the shadow's (0.5, 0.85)
    v2 = record(score=0.75, decision="")  # a V2 answer: scores only
    v2.thresholds = Thresholds(0.7, 0.8)  # the live version's: 0.75 is "review" there too
    shadow.offer(v2, version)
    await until(lambda: bool(log.records))
    assert shadow.view("fraud", "2").agreed == 1


async def test_close_emits_what_it_could_not_score_in_time(versions: Versions) -> None:
    log = Log()
    shadow = ShadowScorer(RolloutPolicy(shadow_queue=100), log)
    slow = versions("2", slow=True)
    offered = [record(f"e{i}") for i in range(10)]
    for live in offered:
        shadow.offer(live, slow)
    started = time.monotonic()
    await shadow.aclose(within_s=0.05)
    assert time.monotonic() - started < 1.0
    assert sorted(r.event_id for r in log.records) == sorted(r.event_id for r in offered)  # each once
    assert any(r.shadow is None for r in log.records)
    later = record("late")
    shadow.offer(later, slow)  # after close: passed on at once
    assert log.records[-1] is later and later.shadow is None
