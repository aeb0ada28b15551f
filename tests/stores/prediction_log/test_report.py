"""The join of decisions and outcomes over real DuckDB, the real log writer and the real outcome store,
its figures held to scikit-learn's on the same data."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sklearn.metrics import average_precision_score, precision_score, recall_score

from shared.domain.outcomes import RETENTION_DAYS, Outcome
from shared.domain.records import Shadowed
from shared.settings import PredictionLogPolicy
from shared.stores.outcomes import MemoryMarks, OutcomeStore
from shared.stores.prediction_log import report
from shared.stores.prediction_log.log import PredictionLog
from shared.stores.prediction_log.sinks import DirectorySink, outcome_name
from tests.stores.prediction_log import HOUR_10, decision

KEY = "join-key"
POLICY = PredictionLogPolicy(sink="dir", flush_s=0.05, hash_key=KEY)
DAY = datetime.fromtimestamp(HOUR_10, UTC).date()  # 2026-12-01
LEARNED = datetime(2026, 12, 20, 9, tzinfo=UTC)
MATURE = DAY + timedelta(days=report.MATURITY_DAYS)  # the first day DAY counts as mature


async def log_decisions(root: Path, scores: dict[int, float], *, version: str = "3", shadow: bool = False) -> None:
    log = PredictionLog(POLICY, DirectorySink(root, "r1"), replica="r1")
    for i, score in scores.items():
        record = decision(i, version=version, score=score)
        if shadow:
            shadowed = min(1.0, score + 0.1)
            record.shadow = Shadowed("4", shadowed, "decline" if shadowed >= 0.8 else "approve")
        log.add(record)
    await log.aclose()


async def keep(root: Path, outcomes: list[Outcome], key: str = KEY, now: datetime = LEARNED) -> list[bool]:
    store = OutcomeStore(DirectorySink(root, "r1", names=outcome_name), MemoryMarks(), key.encode())
    return await store.take(outcomes, now)


def fraud(i: int, *, kind: str = "fraud", amount: float = 100.0, learned: datetime = LEARNED) -> Outcome:
    return Outcome(f"evt-{i}", kind, "chargeback", learned, amount if kind == "fraud" else None)  # type: ignore[arg-type]


def row(rep: report.Report, **where: Any) -> dict[str, Any]:
    (found,) = [r for r in rep.rows if all(r[k] == v for k, v in where.items())]
    return found


async def test_the_figures_are_scikit_learns_on_the_same_labelled_decisions(tmp_path: Path) -> None:
    rng = random.Random(7)  # noqa: S311 reproducible test data
    scores = {i: round(rng.random(), 2) for i in range(400)}  # ties on purpose: PR-AUC steps by distinct score
    truth = {i: rng.random() < 0.15 + 0.7 * scores[i] ** 2 for i in range(300)}  # 100 still await an outcome
    await log_decisions(tmp_path, scores)
    await keep(tmp_path, [fraud(i, kind="fraud" if y else "legit") for i, y in truth.items()])
    rep = report.build(tmp_path, today=DAY + timedelta(days=200))
    figures = row(rep, version="3", role="live")
    labelled = sorted(truth)
    y = [truth[i] for i in labelled]
    declined = [scores[i] >= 0.8 for i in labelled]  # the tiny model's thresholds: review 0.5, decline 0.8
    assert figures["precision"] == pytest.approx(precision_score(y, declined))
    assert figures["recall"] == pytest.approx(recall_score(y, declined))
    assert figures["pr_auc"] == pytest.approx(average_precision_score(y, [scores[i] for i in labelled]))
    assert figures["awaiting"] == pytest.approx(100 / 400)
    missed = [i for i in labelled if truth[i] and scores[i] < 0.5]
    assert (figures["missed"], figures["missed_amount"]) == (len(missed), 100.0 * len(missed))
    assert figures["false_declines"] == sum(1 for i in labelled if not truth[i] and scores[i] >= 0.8)
    assert figures["mature"] is True


async def test_ids_match_only_through_the_same_key(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.9, 2: 0.1})
    await keep(tmp_path, [fraud(1)], key="another key")
    rep = report.build(tmp_path)
    assert (rep.outcomes, rep.unmatched) == (1, 1)  # hashed with another key: it names no decision
    assert row(rep, version="3")["fraud"] == 0


async def test_an_unknown_event_is_kept_and_counted_unmatched_until_its_decision_arrives(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.9})
    await keep(tmp_path, [fraud(1), fraud(77), fraud(78)])
    assert report.build(tmp_path).unmatched == 2
    await log_decisions(tmp_path / "later", {77: 0.2})  # written elsewhere first: the same tree below
    for path in (tmp_path / "later").rglob("*.jsonl"):
        target = tmp_path / path.relative_to(tmp_path / "later").parent / "r2.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    rep = report.build(tmp_path)
    assert rep.unmatched == 1
    assert row(rep, version="3")["missed"] == 1  # evt-77, approved, was fraud


async def test_an_unknown_event_stops_counting_as_unmatched_once_its_window_ends(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.9})
    await keep(tmp_path, [fraud(1), fraud(77)])
    inside = report.build(tmp_path, today=LEARNED.date() + timedelta(days=RETENTION_DAYS))
    assert (inside.unmatched, inside.lapsed) == (1, 0)
    past = report.build(tmp_path, today=LEARNED.date() + timedelta(days=RETENTION_DAYS + 1))
    assert (past.unmatched, past.lapsed) == (0, 1)  # its decision, if it ever was, is gone from the log
    assert past.outcomes == 2


async def test_a_later_outcome_supersedes_by_when_it_was_learned_not_when_it_arrived(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.9, 2: 0.9})
    # evt-1: fraud, then cleared on appeal later; evt-2: cleared, then a late chargeback learned *earlier* arrives
    await keep(tmp_path, [fraud(1), fraud(2, kind="legit", learned=LEARNED + timedelta(days=3))])
    await keep(tmp_path, [fraud(1, kind="legit", learned=LEARNED + timedelta(days=2)), fraud(2)])
    figures = row(report.build(tmp_path), version="3")
    assert (figures["fraud"], figures["legit"], figures["false_declines"]) == (0, 2, 2)
    lines = (tmp_path / "outcomes").rglob("*.jsonl")
    assert sum(len(p.read_bytes().splitlines()) for p in lines) == 4  # both of each are kept


async def test_a_restated_outcome_counts_once(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.1})
    await keep(tmp_path, [fraud(1)])
    await keep(tmp_path, [fraud(1)])  # another store, its own marks: written twice
    figures = row(report.build(tmp_path), version="3")
    assert (figures["missed"], figures["missed_amount"]) == (1, 100.0)


async def test_recent_days_are_immature_never_good(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.9})
    await keep(tmp_path, [fraud(1)])
    assert row(report.build(tmp_path, today=DAY + timedelta(days=30)), version="3")["mature"] is False
    assert row(report.build(tmp_path, today=DAY + timedelta(days=121)), version="3")["mature"] is True
    assert "IMMATURE" in report.render(report.build(tmp_path, today=DAY + timedelta(days=30)))


async def test_a_shadow_version_gets_the_same_figures_on_the_same_events(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.75, 2: 0.2, 3: 0.95}, shadow=True)
    await keep(tmp_path, [fraud(1), fraud(2, kind="legit"), fraud(3)])
    rep = report.build(tmp_path)
    live, shadow = row(rep, version="3", role="live"), row(rep, version="4", role="shadow")
    assert (live["caught"], live["recall"]) == (1, 0.5)  # 0.75 reviewed
    assert (shadow["caught"], shadow["recall"]) == (2, 1.0)  # 0.85 declined
    assert live["decisions"] == shadow["decisions"] == 3


def test_no_log_yet_is_an_empty_report(tmp_path: Path) -> None:
    assert report.build(tmp_path) == report.Report([], 0, 0)
    assert date.today()  # the report's default day


async def test_a_decision_recorded_twice_a_redelivery_counts_once(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(1, score=0.1))
    log.add(decision(1, score=0.1, at=HOUR_10 + 60))  # the queue delivered it again a minute later
    await log.aclose()
    await keep(tmp_path, [fraud(1)])
    figures = row(report.build(tmp_path), version="3")
    assert (figures["decisions"], figures["missed"]) == (1, 1)


async def test_the_cost_of_the_decisions_and_the_optimal_thresholds_match_a_brute_force(tmp_path: Path) -> None:
    rng = random.Random(11)  # noqa: S311 reproducible test data
    scores = {i: round(rng.random(), 3) for i in range(200)}
    truth = {i: rng.random() < scores[i] for i in scores}
    await log_decisions(tmp_path, scores)
    await keep(tmp_path, [fraud(i, kind="fraud" if y else "legit", amount=80.0) for i, y in truth.items()])
    prices = report.Costs(loss_share=0.1, review_cost=6.0, decline_cost=15.0)  # a miss (8) near a review (6)

    def cost(review: float, decline: float) -> float:
        total = 0.0
        for i, y in truth.items():
            s = scores[i]
            total += (0 if y else 15.0) if s >= decline else 6.0 if s >= review else 0.1 * 80.0 if y else 0.0
        return total

    (row,) = report.costs(tmp_path, prices, today=MATURE)
    assert row["live_cost"] == pytest.approx(cost(0.5, 0.8))  # the tiny model's thresholds
    grid = [(r / 20, k / 20) for r in range(21) for k in range(21) if r <= k]
    best = min(cost(r, k) for r, k in grid)
    assert row["optimal_cost"] == pytest.approx(best)
    assert cost(row["optimal_review"], row["optimal_decline"]) == pytest.approx(best)
    assert row["optimal_cost"] <= row["live_cost"]
    assert row["optimal_review"] > 0  # the optimum approves some: a miss's price counts


async def test_the_reliability_bins_are_scikit_learns_calibration_curve(tmp_path: Path) -> None:
    from sklearn.calibration import calibration_curve

    rng = random.Random(3)  # noqa: S311 reproducible test data
    scores = {i: rng.random() for i in range(300)}
    truth = {i: rng.random() < scores[i] ** 2 for i in scores}
    await log_decisions(tmp_path, scores)
    await keep(tmp_path, [fraud(i, kind="fraud" if y else "legit") for i, y in truth.items()])
    bins = report.calibration(tmp_path, today=MATURE)
    rounded = [round(scores[i], 6) for i in truth]  # the log keeps a score to 6 places
    rate, mean = calibration_curve([truth[i] for i in truth], rounded, n_bins=10, strategy="uniform")
    assert [b["fraud_rate"] for b in bins] == pytest.approx(list(rate))
    assert [b["mean_score"] for b in bins] == pytest.approx(list(mean))
    assert sum(b["n"] for b in bins) == 300


async def test_an_immature_days_early_labels_stay_out_of_the_costs_calibration_and_curves(tmp_path: Path) -> None:
    await log_decisions(tmp_path, {1: 0.1, 2: 0.1, 3: 0.9})
    await keep(tmp_path, [fraud(1), fraud(2), fraud(3, kind="legit")])
    prices = report.Costs()
    assert report.costs(tmp_path, prices, today=MATURE - timedelta(days=1)) == []  # chargebacks still coming
    assert report.calibration(tmp_path, today=MATURE - timedelta(days=1)) == []
    assert report.labelled(tmp_path, today=MATURE - timedelta(days=1)) == []
    assert len(report.labelled(tmp_path, today=MATURE)) == 3
    assert [b["n"] for b in report.calibration(tmp_path, today=MATURE)] == [2, 1]
