"""The Grafana dashboard and the Prometheus rules name only metrics the app emits (the catalogue)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shared.telemetry.catalogue import prometheus_names

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "ops" / "grafana" / "scoring.json"
RULES = REPO / "ops" / "prometheus" / "alerts.yml"
OURS = re.compile(r"^(scoring|http_server|messaging|gen_ai|process)_")
# Label values and matchers are quoted; what is left is metric names, labels, functions and keywords.
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
LABELS = re.compile(r"\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    """The names of our metrics an expression reads (labels, functions and keywords are not ours)."""
    return {name for name in IDENT.findall(LABELS.sub("", QUOTED.sub('""', expr))) if OURS.match(name)}


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


@pytest.mark.parametrize(
    ("path", "text", "replacement"),
    [
        (RULES, "scoring_llm_breaker_state", "scoring_llm_breaker"),
        (RULES, "http_server_request_duration_seconds_bucket", "http_server_request_duration_bucket"),
        (DASHBOARD, "scoring_cache_lookups_total", "scoring_cache_lookups"),
        (DASHBOARD, "scoring_queue_message_age_seconds_bucket", "scoring_queue_age_seconds_bucket"),
    ],
)
def test_a_misnamed_metric_is_caught(path: Path, text: str, replacement: str) -> None:
    """Mutation: rename one metric in a copy of the file; the check must name it."""
    source = path.read_text()
    assert text in source
    mutated = source.replace(text, replacement, 1)
    exprs = rule_exprs(yaml.safe_load(mutated)) if path == RULES else dashboard_exprs(json.loads(mutated))
    assert any(replacement in finding for finding in unknown(exprs))
