"""Drift per version: PSI of the window against the reference, per feature and for the score."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from shared.domain.records import DecisionRecord
from shared.fleet.drift import EPSILON, SCORE, DriftMonitor, population_stability
from shared.settings import DriftPolicy
from shared.telemetry import metrics

POLICY = DriftPolicy(sample=1.0, reference=1000, window=1000, bins=10)
COLUMNS = tuple(f"user_f{i}" for i in range(20)) + tuple(f"country=C{i}" for i in range(5))
RNG_SEED = 26


def record(
    model: str,
    row: Sequence[float],
    score: float,
    *,
    version: str = "1",
    columns: Sequence[str] = COLUMNS,
    defaulted: Mapping[str, str] | None = None,
) -> DecisionRecord:
    return DecisionRecord(
        0.0,
        "http",
        "evt",
        model,
        version,
        "fp",
        columns,
        np.asarray(row, dtype=np.float32),
        defaulted or {},
        score,
        "approve",
        "",
        {},
    )


def population(
    model: str, n: int, rng: np.random.Generator, *, shift: Mapping[int, float] | None = None, score_shift: float = 0.0
) -> list[DecisionRecord]:
    """`n` records: 20 normal features, 5 one-hot indicators (20% set each), a beta-distributed score."""
    rows = rng.normal(size=(n, len(COLUMNS)))
    rows[:, 20:] = rng.random((n, 5)) < 0.2
    for j, by in (shift or {}).items():
        rows[:, j] += by
    scores = np.clip(rng.beta(2, 5, size=n) + score_shift, 0.0, 1.0)
    return [record(model, rows[i], float(scores[i])) for i in range(n)]


def only_view(monitor: DriftMonitor, model: str):  # type: ignore[no-untyped-def]
    (view,) = monitor.describe(model)
    return view


def test_the_same_distribution_gives_a_psi_near_zero(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    monitor.observe(population(model, 1000, rng))
    view = only_view(monitor, model)
    assert set(view.psi) == {*COLUMNS, SCORE}
    # NOTE: sampling alone gives about (bins - 1)(1/R + 1/W) = 0.018 per column
    assert max(view.psi.values()) < 0.08, view.psi


def test_a_shifted_feature_moves_its_own_psi_and_no_other(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    monitor.observe(population(model, 1000, rng, shift={3: 1.0}))  # one standard deviation
    psi = only_view(monitor, model).psi
    assert psi["user_f3"] > 0.5
    others = {name: value for name, value in psi.items() if name != "user_f3"}
    assert max(others.values()) < 0.08, others


def test_shifted_scores_move_the_score_psi(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    monitor.observe(population(model, 1000, rng, score_shift=0.15))
    psi = only_view(monitor, model).psi
    assert psi[SCORE] > 0.25
    assert max(v for n, v in psi.items() if n != SCORE) < 0.08


def test_a_worked_example_matches_the_textbook_formula(model: str) -> None:
    """Reference 1..1000: each of the 10 quantile bins holds 10%. The window puts 20% in the first
    decile, 5% in the second and the last, 10% in each other one:
    PSI = Σ (A - E) ln(A / E) = 0.1 ln 2 + 2 * (-0.05) ln 0.5 = 0.2 ln 2 ≈ 0.1386."""
    columns = ("amount",)
    monitor = DriftMonitor(POLICY)
    values = np.random.default_rng(RNG_SEED).permutation(np.arange(1, 1001))
    monitor.observe([record(model, [v], 0.5, columns=columns) for v in values])
    per_decile = [200, 50, 100, 100, 100, 100, 100, 100, 100, 50]
    window = [100 * d + 1 + i % 100 for d, n in enumerate(per_decile) for i in range(n)]
    monitor.observe([record(model, [v], 0.5, columns=columns) for v in window])
    psi = only_view(monitor, model).psi
    assert psi["amount"] == round(0.2 * math.log(2), 4) == 0.1386
    assert psi[SCORE] == 0.0  # a constant score, constant still


def test_indicator_columns_are_binned_by_value(model: str) -> None:
    """0/1 in the reference: bins {0, 1, other}. 20% ones, then 50%:
    PSI = (0.5 - 0.8) ln(0.5/0.8) + (0.5 - 0.2) ln(0.5/0.2) (the empty `other` bin adds 0)."""
    columns = ("channel=web",)
    monitor = DriftMonitor(POLICY)
    monitor.observe([record(model, [float(i % 5 == 0)], 0.5, columns=columns) for i in range(1000)])
    monitor.observe([record(model, [float(i % 2)], 0.5, columns=columns) for i in range(1000)])
    expected = (0.5 - 0.8) * math.log(0.5 / 0.8) + (0.5 - 0.2) * math.log(0.5 / 0.2)
    assert only_view(monitor, model).psi["channel=web"] == round(expected, 4)


def test_a_constant_column_that_starts_to_vary_is_a_large_shift(model: str) -> None:
    """A feature on its default (60.0) all through the reference, then 70% other values: those fall in
    the `other` bin, which the reference never filled (its share counts as EPSILON)."""
    columns = ("user_avg_amount_30d", "user_age")
    monitor = DriftMonitor(POLICY)
    monitor.observe([record(model, [60.0, 30.0], 0.5, columns=columns) for _ in range(1000)])
    window = [[60.0 if i % 10 < 3 else 100.0 + i, 30.0] for i in range(1000)]
    monitor.observe([record(model, row, 0.5, columns=columns) for row in window])
    psi = only_view(monitor, model).psi
    expected = (0.3 - 1.0) * math.log(0.3 / 1.0) + (0.7 - EPSILON) * math.log(0.7 / EPSILON)
    assert psi["user_avg_amount_30d"] == round(expected, 4)
    assert psi["user_age"] == 0.0  # constant in both


def test_the_formula_clips_empty_bins_and_ignores_bins_empty_on_both_sides() -> None:
    reference = np.array([[50, 50, 0, 0]])
    window = np.array([[50, 0, 50, 0]])
    by_hand = (EPSILON - 0.5) * math.log(EPSILON / 0.5) + (0.5 - EPSILON) * math.log(0.5 / EPSILON)
    assert population_stability(reference, window)[0] == pytest.approx(by_hand)


def test_no_psi_until_the_reference_is_full(model: str) -> None:
    monitor = DriftMonitor(POLICY)
    rng = np.random.default_rng(RNG_SEED)
    monitor.observe(population(model, 999, rng))
    view = only_view(monitor, model)
    assert (view.reference_events, view.window_events, view.psi) == (999, 999, {})
    assert not [k for k in metrics.DRIFT_PSI.values if k[0] == model]
    monitor.observe(population(model, 1, rng))
    view = only_view(monitor, model)
    assert view.reference_events == 1000 and set(view.psi) == {*COLUMNS, SCORE}


def test_the_defaulted_share_is_the_windows(model: str) -> None:
    monitor = DriftMonitor(POLICY)
    rng = np.random.default_rng(RNG_SEED)
    records = population(model, 1000, rng)
    for i, r in enumerate(records):
        if i % 10 < 3:
            r.defaulted = {"user_f1": "missing", "not_a_column": "missing"}
    monitor.observe(records[:500])  # the reference is not full: the shares are reported already
    assert only_view(monitor, model).defaulted["user_f1"] == 0.3
    monitor.observe(records[500:])
    monitor.observe(population(model, 500, rng))  # the window's last 1000: 150 of them defaulted
    view = only_view(monitor, model)
    assert view.defaulted["user_f1"] == 0.15
    assert view.defaulted["user_f2"] == 0.0 and "not_a_column" not in view.defaulted
    assert metrics.DRIFT_DEFAULTED.values[(model, "1", "user_f1")] == pytest.approx(0.15)


def test_the_metrics_carry_what_describe_shows(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    monitor.observe(population(model, 300, rng, shift={0: 2.0}))
    view = only_view(monitor, model)
    for name in (*COLUMNS, SCORE):
        assert round(metrics.DRIFT_PSI.values[(model, "1", name)], 4) == view.psi[name]
    assert view.psi["user_f0"] > 0.2


@pytest.mark.parametrize(
    "policy",
    [POLICY, DriftPolicy(sample=1.0, reference=1000, window=300), DriftPolicy(sample=1.0, reference=200, window=1000)],
    ids=["window=reference", "window<reference", "window>reference"],
)
def test_the_figures_do_not_depend_on_how_the_records_are_batched(model: str, policy: DriftPolicy) -> None:
    rng = np.random.default_rng(RNG_SEED)
    records = population(model, 1000, rng) + population(model, 2500, rng, shift={5: 0.5})
    whole, pieces, by_one = DriftMonitor(policy), DriftMonitor(policy), DriftMonitor(policy)
    whole.observe(records)
    for start in range(0, len(records), 37):
        pieces.observe(records[start : start + 37])
    for r in records[:1300]:
        by_one.observe([r])
    by_one.observe(records[1300:])
    assert whole.describe(model) == pieces.describe(model) == by_one.describe(model)
    (view,) = whole.describe(model)
    assert (view.reference_events, view.window_events) == (policy.reference, policy.window)
    assert view.psi["user_f5"] > 0.1 and max(v for n, v in view.psi.items() if n != "user_f5") < 0.1


def test_the_window_slides_back_when_the_shift_is_over(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    monitor.observe(population(model, 1000, rng, shift={7: 1.0}))
    assert only_view(monitor, model).psi["user_f7"] > 0.5
    for _ in range(10):
        monitor.observe(population(model, 100, rng))  # the shifted records leave the window
    assert only_view(monitor, model).psi["user_f7"] < 0.08


def test_each_version_has_its_own_reference_newest_last(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1000, rng))
    shifted = population(model, 1000, rng, shift={2: 3.0})
    for r in shifted:
        r.version = "2"
    monitor.observe(shifted)  # version 2's reference: shifted from its first record on
    monitor.observe([record(model, [0.0] * 25, 0.5, version="other", columns=(*COLUMNS[:-1], "x"))])
    views = monitor.describe(model)
    assert [v.version for v in views] == ["1", "2", "other"]
    assert views[1].reference_events == 1000 and views[1].psi["user_f2"] == 0.0  # window = reference: no drift
    assert monitor.describe("no-such-model") == []


def test_records_whose_columns_differ_from_the_versions_are_ignored(model: str) -> None:
    monitor = DriftMonitor(POLICY)
    monitor.observe([record(model, [1.0], 0.5, columns=("a",))])
    monitor.observe([record(model, [1.0], 0.5, columns=("b",))])
    assert only_view(monitor, model).window_events == 1


def test_a_forgotten_version_loses_its_state_and_its_series(model: str) -> None:
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(POLICY)
    monitor.observe(population(model, 1100, rng))
    assert (model, "1", SCORE) in metrics.DRIFT_PSI.values
    monitor.forget(model, "1")
    monitor.forget(model, "1")  # twice: nothing to do
    assert monitor.describe(model) == []
    assert not [k for g in (metrics.DRIFT_PSI, metrics.DRIFT_DEFAULTED) for k in g.values if k[0] == model]


def test_no_reference_means_no_drift(model: str) -> None:
    monitor = DriftMonitor(DriftPolicy(sample=1.0, reference=0))
    monitor.observe(population(model, 200, np.random.default_rng(RNG_SEED)))
    assert monitor.describe(model) == []
    assert not [k for k in metrics.DRIFT_DEFAULTED.values if k[0] == model]


def test_records_in_small_batches_are_counted_together_and_before_a_describe(model: str) -> None:
    """The log hands over 64 records at a time: they are counted per CATCH_UP, or when asked."""
    from shared.fleet.drift import CATCH_UP
    from shared.telemetry import metrics

    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(DriftPolicy(sample=1.0, reference=100, window=100))
    records = population(model, CATCH_UP, rng)  # 64 at once, then CATCH_UP - 64 that wait
    monitor.observe(records[:64])  # the first batch is counted at once (nothing counted before)
    for start in range(64, CATCH_UP, 64):
        monitor.observe(records[start : start + 64])
    assert not [k for k in metrics.DRIFT_PSI.values if k[0] == model]
    view = only_view(monitor, model)  # counted now
    assert (view.reference_events, view.window_events) == (100, 100) and view.psi


def test_a_sample_counts_every_kth_record_across_batches(model: str) -> None:
    """DRIFT_SAMPLE 0.25: one record in four is counted, wherever the log's batches cut the stream."""
    rng = np.random.default_rng(RNG_SEED)
    monitor = DriftMonitor(DriftPolicy(sample=0.25, reference=100, window=100))
    records = population(model, 300, rng)
    for start, size in ((0, 7), (7, 64), (71, 1), (72, 228)):
        monitor.observe(records[start : start + size])
    view = only_view(monitor, model)
    assert (view.reference_events, view.window_events) == (75, 75)  # 300 / 4, whatever the cuts
