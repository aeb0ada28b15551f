"""Outcomes in Azure (issue 57): the daily report's timer runs on a schedule the app sets, and the live
version's recall and precision are alerted on against its own trailing baseline, over the gauges the
report publishes (their names, attributes and window values as the code writes them), mature labels only.
Checked on infra/ and on copies broken on purpose (rule 17)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import INFRA, REPO, Module, trigger

ALERTS = INFRA / "modules" / "alerts.bicep"
APP = INFRA / "modules" / "app.bicep"
DAILY = REPO / "shared" / "stores" / "prediction_log" / "daily.py"
CATALOGUE = REPO / "shared" / "telemetry" / "catalogue.py"
NCRONTAB = re.compile(r"\A\S+( \S+){5}\Z")  # six fields, seconds first (the host's NCrontab with seconds)


def windows(daily: str) -> tuple[str, ...]:
    """The values of `scoring.window` the daily report writes (its `Window` literal)."""
    found = re.search(r'^Window = Literal\[(.*)\]$', daily, re.M)
    assert found, "daily.py declares no Window literal"
    return tuple(re.findall(r'"(\w+)"', found.group(1)))


def drop_alert_findings(alerts_bicep: Path, daily: str, catalogue: str) -> list[str]:
    module = Module(alerts_bicep)
    rules = {str(r.get("name", "")): r for r in module.resources("Microsoft.Insights/scheduledQueryRules")}
    shared = {name: str(v["value"]) for name, v in module.variables.items()}
    current, baseline = windows(daily)
    findings = []
    for figure in ("recall", "precision"):
        found = [r for name, r in rules.items() if name.rstrip("'").endswith(f"-outcomes-{figure}-drop")]
        if not found:
            findings.append(f"no alert rule *-outcomes-{figure}-drop")
            continue
        criterion = found[0]["properties"]["criteria"]["allOf"][0]
        query = re.sub(r"\$\{(\w+)\}", lambda m: shared.get(m.group(1), m.group(0)), str(criterion["query"]))
        query = query.replace("\\'", "'")
        metric = f"scoring.outcomes.{figure}"
        if f"where name == '{metric}'" not in query or f'"{metric}"' not in catalogue:
            findings.append(f"{figure}: the query does not read the gauge {metric} the catalogue declares")
        if "where role == 'live'" not in query or "customDimensions['scoring.role']" not in query:
            findings.append(f"{figure}: not the live version's (scoring.role == 'live')")
        if "customDimensions['scoring.window']" not in query:
            findings.append(f"{figure}: the window is not read from scoring.window")
        for value in (current, baseline):
            if f"window == '{value}'" not in query:
                findings.append(f"{figure}: the query never reads the window {value!r} the report writes")
        if "drop = max(baseline - current)" not in query or criterion["metricMeasureColumn"] != "drop":
            findings.append(f"{figure}: it does not measure the drop of current below baseline")
        if criterion["operator"] != "GreaterThan":
            findings.append(f"{figure}: it does not fire on a drop above the threshold")
    return findings


def test_recall_and_precision_drops_are_alerted_on_against_the_versions_own_baseline() -> None:
    assert drop_alert_findings(ALERTS, DAILY.read_text(), CATALOGUE.read_text()) == []


def test_the_baseline_is_28_mature_days_and_immature_days_are_left_out() -> None:
    daily = DAILY.read_text()
    assert re.search(r"^BASELINE_DAYS = 28\b", daily, re.M)
    assert 'if row["mature"]:' in daily  # the headline reads mature rows only (tests/stores: the behaviour)


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("name: '${prefix}-outcomes-recall-drop'", "name: '${prefix}-outcomes-recall'"),
        ("where name == \\'scoring.outcomes.precision\\'", "where name == \\'scoring.outcomes.precisions\\'"),
        ("| where role == \\'live\\'", "| where role != \\'shadow\\'"),
        ("window == \\'baseline\\')", "window == \\'trailing\\')"),
        ("summarize drop = max(baseline - current)", "summarize drop = max(current - baseline)"),
    ],
)  # fmt: skip
def test_each_broken_drop_alert_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = ALERTS.read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "alerts.bicep"
    broken.write_text(source.replace(text, replacement))
    assert drop_alert_findings(broken, DAILY.read_text(), CATALOGUE.read_text()), f"not caught: {replacement}"


def test_a_window_renamed_in_the_code_alone_is_caught() -> None:
    daily = DAILY.read_text().replace('Literal["current", "baseline"]', 'Literal["current", "trailing"]')
    assert drop_alert_findings(ALERTS, daily, CATALOGUE.read_text())


def schedule_findings(app_bicep: Path) -> list[str]:
    _, timer = trigger("timer_trigger", "outcomes_report")
    setting = str(timer["schedule"])
    if not (setting.startswith("%") and setting.endswith("%")):
        return [f"the timer's schedule {setting!r} is not an app setting"]
    module = Module(app_bicep)
    env = {
        item["name"]: item.get("value")
        for var in module.variables.values()
        if isinstance(var["value"], list)
        for item in var["value"]
        if isinstance(item, dict) and "name" in item
    }
    value = module.resolve(env.get(setting.strip("%")))
    if value is None:
        return [f"{setting.strip('%')} is not set on the app"]
    if not isinstance(value, str) or not NCRONTAB.match(value):
        return [f"{setting.strip('%')}={value!r} is not six NCRONTAB fields"]
    if timer.get("run_on_startup") not in (None, False):
        return ["run_on_startup: every scale-out would run the report"]
    return []


def test_the_timer_runs_on_a_schedule_the_app_sets() -> None:
    assert schedule_findings(APP) == []


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("  { name: 'OUTCOMES_REPORT_SCHEDULE', value: outcomesReportSchedule }", ""),
        ("param outcomesReportSchedule string = '0 30 2 * * *'", "param outcomesReportSchedule string = '30 2 * * *'"),
    ],
)  # fmt: skip
def test_a_schedule_missing_or_without_seconds_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = APP.read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "app.bicep"
    broken.write_text(source.replace(text, replacement))
    assert schedule_findings(broken)
