"""The review tail is watched: an alert on refused lower verdicts (someone steering the reviewer through
a note) and one on a shift of the escalated share; each reads the app's `scoring.llm.reviews` counter by
the dimension the catalogue declares (`scoring.direction`) and the values the reviewer records. Checked on
alerts.bicep and on copies broken on purpose (rule 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import INFRA, Module

METRIC = "scoring.llm.reviews"


def review_alert_findings(alerts_bicep: Path) -> list[str]:
    rules = {
        str(r.get("name", "")): r for r in Module(alerts_bicep).resources("Microsoft.Insights/scheduledQueryRules")
    }
    findings = []
    for suffix, value in (("review-refused", "refused"), ("review-escalation-shift", "escalated")):
        found = [r for name, r in rules.items() if name.endswith(f"{suffix}'") or name.endswith(suffix)]
        if not found:
            findings.append(f"no alert rule *-{suffix}")
            continue
        query = str(found[0]["properties"]["criteria"]["allOf"][0]["query"])
        for needed in (METRIC, "scoring.direction", f"'{value}'"):
            if needed not in query.replace("\\'", "'"):
                findings.append(f"{suffix}: the query does not read {needed!r}")
    return findings


def test_the_review_tail_has_its_alerts() -> None:
    assert review_alert_findings(INFRA / "modules" / "alerts.bicep") == []


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("name: '${prefix}-review-refused'", "name: '${prefix}-something-else'"),
        ("== \\'refused\\'", "== \\'lowered\\'"),
        ("escalated = tostring(customDimensions[\\'scoring.direction\\'])", "escalated = tostring(customDimensions[\\'direction\\'])"),
    ],
)  # fmt: skip
def test_each_broken_review_alert_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = (INFRA / "modules" / "alerts.bicep").read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "alerts.bicep"
    broken.write_text(source.replace(text, replacement))
    assert review_alert_findings(broken), f"not caught: {replacement}"
