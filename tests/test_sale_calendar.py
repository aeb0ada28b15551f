"""The sale calendar, checked before provision (infra/hooks/sale_calendar.py, azure.yaml preprovision).

Each refusal starts from a window the hook accepts and breaks one thing in it (a mutation): the good
window passes, the broken one is refused with a message that names the window, the value and the fix.
Whether app.bicep builds the same cron strings is tests/infra/test_sale_calendar.py's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "infra" / "hooks"
NOW = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
GOOD = {"start": "2026-12-11T08:45", "end": "2026-12-11T11:00", "timezone": "Europe/London", "replicas": 12}


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sale_calendar", HOOKS / "sale_calendar.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NOTE: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


hook = _hook()
DEV = hook.Bounds(profile="dev", min_replicas=2, max_replicas=12, lead_minutes=15)


def check(windows: Any, bounds: Any = DEV) -> list[dict[str, Any]]:
    text = windows if isinstance(windows, str) else json.dumps(windows)
    return hook.check_calendar(text, bounds, NOW)


def test_a_good_calendar_becomes_one_cron_rule_a_window() -> None:
    second = {"start": "2027-01-02T03:04", "end": "2027-01-02T05:00", "timezone": "America/New_York", "replicas": 2}
    assert check([GOOD, second]) == [
        {
            "name": "sale-window-0",
            "custom": {
                "type": "cron",
                "metadata": {
                    "timezone": "Europe/London",
                    "start": "45 8 11 12 *",
                    "end": "0 11 11 12 *",
                    "desiredReplicas": "12",
                },
            },
        },
        {
            "name": "sale-window-1",
            "custom": {
                "type": "cron",
                "metadata": {
                    "timezone": "America/New_York",
                    "start": "4 3 2 1 *",
                    "end": "0 5 2 1 *",
                    "desiredReplicas": "2",
                },
            },
        },
    ]


def test_an_empty_calendar_makes_no_rules() -> None:
    assert check("") == [] and check("[]") == []


def test_a_window_across_new_year_is_one_window() -> None:
    late = {**GOOD, "start": "2026-12-31T22:00", "end": "2027-01-01T02:00"}
    (rule,) = check([late])
    assert rule["custom"]["metadata"]["start"] == "0 22 31 12 *" and rule["custom"]["metadata"]["end"] == "0 2 1 1 *"


BROKEN = [
    (
        "start-and-end-swapped",
        {"start": GOOD["end"], "end": GOOD["start"]},
        r"sale window 0: start 2026-12-11T11:00 is not before end 2026-12-11T08:45: swap them",
    ),
    ("start-equals-end", {"end": GOOD["start"]}, r"is not before end"),
    (
        "unknown-time-zone",
        {"timezone": "Mars/Olympus"},
        r"sale window 0: timezone 'Mars/Olympus' is not an IANA time zone: use a name like 'Europe/London'",
    ),
    ("offset-for-a-zone", {"timezone": "+01:00"}, r"is not an IANA time zone"),
    (
        "replicas-above-max",
        {"replicas": 13},
        r"sale window 0: replicas 13 is outside 1\.\.12, the maxReplicas of profile 'dev'.*raise SCORING_MAX_REPLICAS",
    ),
    ("replicas-zero", {"replicas": 0}, r"replicas 0 is outside 1\.\.12"),
    ("replicas-a-string", {"replicas": "12"}, r"replicas '12' is not a whole number"),
    (
        "time-with-a-space",
        {"start": "2026-12-11 08:45"},
        r"sale window 0: start '2026-12-11 08:45' is not a local time \"YYYY-MM-DDTHH:MM\"",
    ),
    ("time-with-seconds", {"end": "2026-12-11T11:00:00"}, r"end '2026-12-11T11:00:00' is not a local time"),
    ("time-with-an-offset", {"start": "2026-12-11T08:45Z"}, r"is not a local time"),
    ("no-such-date", {"start": "2026-02-30T08:45"}, r"start '2026-02-30T08:45' is no date"),
    (
        "a-time-the-clocks-skip",
        {"start": "2027-03-28T01:30", "end": "2027-03-28T03:00"},
        r"start 2027-03-28T01:30 does not exist in Europe/London",
    ),
    ("over-31-days", {"end": "2027-01-21T11:00"}, r"is 41 days, over 31"),
    (
        "wholly-in-the-past",
        {"start": "2026-11-27T08:45", "end": "2026-11-27T11:00"},
        r"it ended at 2026-11-27T11:00 Europe/London: remove it .*same date next year",
    ),
    (
        "a-year-or-more-ahead",
        {"start": "2027-12-11T08:45", "end": "2027-12-11T11:00"},
        r"a year or more ahead: a cron rule has no year",
    ),
    ("a-missing-field", {"replicas": None}, r"sale window 0 .*missing \['replicas'\]"),
    ("an-unknown-field", {"replica": 3}, r"unknown fields \['replica'\]"),
]


@pytest.mark.parametrize(("change", "message"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_a_broken_window_is_refused_with_its_fix(change: dict[str, Any], message: str) -> None:
    assert check([GOOD]), "the unbroken window must pass"
    window = {**GOOD, **{k: v for k, v in change.items() if v is not None}}
    for key in [k for k, v in change.items() if v is None]:
        del window[key]
    with pytest.raises(hook.CalendarError, match=message):
        check([window])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{'start': '2026-12-11T08:45'}]", r"is not JSON \(.*\): set a list like \[\{\"start\""),
        (json.dumps(GOOD), r"is a JSON dict, not a list: wrap the window in \[ \]"),
        ('["2026-12-11T08:45"]', r"sale window 0 is '2026-12-11T08:45', not an object"),
    ],
)
def test_a_calendar_of_the_wrong_shape_is_refused(text: str, message: str) -> None:
    with pytest.raises(hook.CalendarError, match=message):
        check(text)


def test_the_ceiling_follows_the_profile_and_the_override_as_main_bicep_does() -> None:
    profiles = hook.read_profiles((REPO / "infra" / "main.bicep").read_text())
    assert set(profiles) >= {"dev", "sale"} and all("maxReplicas" in p for p in profiles.values())
    sale = hook.resolve_bounds({"SCORING_PROFILE": "sale"}, profiles)
    assert sale.max_replicas == max(sale.min_replicas, profiles["sale"]["maxReplicas"])
    raised = hook.resolve_bounds({"SCORING_MAX_REPLICAS": "40"}, profiles)
    assert raised.max_replicas == 40 and check([{**GOOD, "replicas": 40}], raised)
    floor = hook.resolve_bounds({"SCORING_MIN_REPLICAS": "1", "SCORING_MAX_REPLICAS": "1"}, profiles)
    assert (floor.min_replicas, floor.max_replicas) == (2, 2)  # max(2, ...), as main.bicep
    with pytest.raises(hook.CalendarError, match="SCORING_PROFILE is 'prod'"):
        hook.resolve_bounds({"SCORING_PROFILE": "prod"}, profiles)
    with pytest.raises(hook.CalendarError, match="SCORING_MAX_REPLICAS is 'many'"):
        hook.resolve_bounds({"SCORING_MAX_REPLICAS": "many"}, profiles)


def _run(calendar: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PY": sys.executable, "SCORING_SALE_CALENDAR": calendar, **env}
    return subprocess.run(
        ["sh", str(HOOKS / "sale-calendar.sh")], cwd=REPO, env=full, capture_output=True, text=True, timeout=60
    )


def test_the_hook_prints_the_rules_and_refuses_a_bad_calendar_with_one_line() -> None:
    soon = datetime.now(UTC) + timedelta(days=7)  # NOTE: the hook reads the real clock
    good = {"start": f"{soon:%Y-%m-%d}T08:45", "end": f"{soon:%Y-%m-%d}T11:00", "timezone": "UTC", "replicas": 12}
    done = _run(json.dumps([good]))
    assert done.returncode == 0, done.stderr
    assert f'"start": "45 8 {soon.day} {soon.month} *"' in done.stdout and '"desiredReplicas": "12"' in done.stdout
    lead = hook.read_profiles((REPO / "infra" / "main.bicep").read_text())["dev"]["saleLeadMinutes"]
    assert f"open {lead} minutes before its burst" in done.stdout
    refused = _run(json.dumps([{**good, "timezone": "Mars/Olympus"}]))
    assert refused.returncode == 1
    assert (
        refused.stderr.count("\n") == 1
        and "error: sale calendar: sale window 0: timezone 'Mars/Olympus'" in refused.stderr
    )


def test_azd_runs_the_check_before_provision_on_every_platform() -> None:
    text = (REPO / "azure.yaml").read_text()
    block = re.search(r"^  preprovision:\n((?:    .*\n)+)", text, re.M)
    assert block, "azure.yaml has no preprovision hook"
    assert "run: ./infra/hooks/sale-calendar.sh" in block.group(1)
    assert "run: ./infra/hooks/sale-calendar.ps1" in block.group(1)
    assert "continueOnError: false" in block.group(1)
