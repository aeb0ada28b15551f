"""The Grafana dashboard and the Prometheus rules name only metrics the app emits (the catalogue), and
read only the labels those metrics carry."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.telemetry.catalogue import CATALOGUE, prometheus_name, prometheus_names

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "ops" / "grafana" / "scoring.json"
RULES = REPO / "ops" / "prometheus" / "alerts.yml"
OURS = re.compile(r"^(scoring|http_server|messaging|gen_ai|process)_")
# Label values and matchers are quoted; what is left is metric names, labels, functions and keywords.
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def metric_names(expr: str) -> set[str]:
    """The names of our metrics an expression reads (labels, functions and keywords are not ours)."""
    return {name for name in IDENT.findall(LABELS.sub("", QUOTED.sub('""', expr))) if OURS.match(name)}


def series_labels() -> dict[str, set[str]]:
    """Every series name a scrape can hold -> the labels it carries (attributes, dots as underscores;
    a histogram's buckets add `le`)."""
    found: dict[str, set[str]] = {}
    for spec in CATALOGUE:
        name, labels = prometheus_name(spec), {a.replace(".", "_") for a in spec.attributes}
        if spec.kind == "histogram":
            found |= {name + "_bucket": labels | {"le"}, name + "_sum": labels, name + "_count": labels}
        else:
            found[name] = labels
    return found


def unknown_labels(exprs: Iterator[str]) -> list[str]:
    """Labels an expression matches on a metric that lacks them, or groups by though none of its metrics has them."""
    carried = series_labels()
    found = []
    for expr in exprs:
        bare = QUOTED.sub('""', expr)  # NOTE: a quoted value may hold braces (`\\{name\\}` of a route)
        for name, body in SELECTOR.findall(bare):
            if name in carried:
                found += [
                    f"{name} has no label {label}" for label in MATCHER.findall(body) if label not in carried[name]
                ]
        read = set().union(*(carried.get(name, set()) for name in metric_names(expr)))
        for group in GROUPING.findall(bare):
            labels = {label.strip() for label in group.split(",") if label.strip()}
            found += [f"no metric of {expr.strip()!r} has label {label}" for label in sorted(labels - read)]
    return found


def dashboard_exprs(dashboard: dict[str, object]) -> Iterator[str]:
    for panel in dashboard["panels"]:  # type: ignore[attr-defined]
        for target in panel["targets"]:
            yield target["expr"]


def rule_exprs(rules: dict[str, object]) -> Iterator[str]:
    for group in rules["groups"]:  # type: ignore[attr-defined]
        for rule in group["rules"]:
            yield rule["expr"]


def unknown(exprs: Iterator[str]) -> list[str]:
    """Each expression's metric names that the catalogue does not emit (an expression naming none counts)."""
    known = prometheus_names()
    found = []
    for expr in exprs:
        names = metric_names(expr)
        found += [f"{n} in {expr.strip()!r}" for n in sorted(names - known)]
        if not names:
            found.append(f"no metric of ours in {expr.strip()!r}")
    return found


def test_the_dashboard_reads_only_emitted_metrics() -> None:
    assert unknown(dashboard_exprs(json.loads(DASHBOARD.read_text()))) == []


def test_the_alert_rules_read_only_emitted_metrics_and_cover_the_issue() -> None:
    rules = yaml.safe_load(RULES.read_text())
    assert unknown(rule_exprs(rules)) == []
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"ScoreP99OverBudget", "Score5xxRate", "QueueMessagesFailing", "LlmBreakerOpen"} <= alerts
    assert {"ModelReloadFailed", "FeaturesDefaulted", "QueueAgeHigh"} <= alerts
    assert {"FeatureDrift", "ScoreDrift", "PredictionLogDropping", "CanaryAborted", "ShadowDisagreementHigh"} <= alerts


def test_the_rules_and_the_dashboard_read_only_labels_their_metrics_carry() -> None:
    assert unknown_labels(rule_exprs(yaml.safe_load(RULES.read_text()))) == []
    assert unknown_labels(dashboard_exprs(json.loads(DASHBOARD.read_text()))) == []


def test_the_dashboard_shows_the_rollouts_and_the_record_of_decisions() -> None:
    read = set().union(*(metric_names(e) for e in dashboard_exprs(json.loads(DASHBOARD.read_text()))))
    assert {
        "scoring_drift_psi",
        "scoring_drift_defaulted_ratio",
        "scoring_shadow_events_total",
        "scoring_shadow_score_difference_bucket",
        "scoring_canary_decisions_total",
        "scoring_canary_weight",
        "scoring_prediction_log_records_total",
        "scoring_prediction_log_buffered",
    } <= read


@pytest.mark.parametrize(
    ("path", "text", "replacement"),
    [
        (RULES, "scoring_llm_breaker_state", "scoring_llm_breaker"),
        (RULES, "http_server_request_duration_seconds_bucket", "http_server_request_duration_bucket"),
        (DASHBOARD, "scoring_cache_lookups_total", "scoring_cache_lookups"),
        (DASHBOARD, "scoring_queue_message_age_seconds_bucket", "scoring_queue_age_seconds_bucket"),
        (RULES, "scoring_drift_psi", "scoring_drift_psi_ratio"),
        (RULES, "scoring_prediction_log_records_total", "scoring_prediction_log_records"),
        (DASHBOARD, "scoring_shadow_score_difference_bucket", "scoring_shadow_score_difference_seconds_bucket"),
    ],
)
def test_a_misnamed_metric_is_caught(path: Path, text: str, replacement: str) -> None:
    """Mutation: rename one metric in a copy of the file; the check must name it."""
    source = path.read_text()
    assert text in source
    mutated = source.replace(text, replacement, 1)
    exprs = rule_exprs(yaml.safe_load(mutated)) if path == RULES else dashboard_exprs(json.loads(mutated))
    assert any(replacement in finding for finding in unknown(exprs))


@pytest.mark.parametrize(
    ("path", "text", "replacement"),
    [
        (RULES, 'scoring_drift_psi{scoring_feature!="score"}', 'scoring_drift_psi{feature!="score"}'),
        (RULES, "by (scoring_model, scoring_reason)", "by (scoring_model, reason)"),
        (DASHBOARD, "by (scoring_model, scoring_arm, scoring_decision)", "by (scoring_model, arm, scoring_decision)"),
        (
            DASHBOARD,
            "scoring_prediction_log_records_total[",
            'scoring_prediction_log_records_total{scoring_model=\\"x\\"}[',
        ),
    ],
)
def test_a_label_the_metric_lacks_is_caught(path: Path, text: str, replacement: str) -> None:
    """Mutation: misname one label in a copy of the file; the label check must name it."""
    source = path.read_text()
    assert text in source
    mutated = source.replace(text, replacement, 1)
    exprs = rule_exprs(yaml.safe_load(mutated)) if path == RULES else dashboard_exprs(json.loads(mutated))
    assert unknown_labels(exprs)
