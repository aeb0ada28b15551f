"""The sale calendar, checked before provision (azd preprovision: infra/hooks/sale-calendar.sh).

SCORING_SALE_CALENDAR is a JSON array of windows, each
  {"start": "2026-12-11T08:45", "end": "2026-12-11T11:00", "timezone": "Europe/London", "replicas": 30}
(local times in an IANA zone). main.bicep passes it to app.bicep, which makes one KEDA `cron` rule
a window (docs/platform.md P80). ARM would take a bad window as it is and KEDA would ignore it or
scale at the wrong time: this refuses it first, with one message naming the window, the value and
the fix, and prints the rules the Bicep will build (the same strings:
tests/infra/test_sale_calendar.py evaluates app.bicep's expression against `cron_rules`).

A cron rule "minute hour day month *" has no year: it recurs every year. So a window wholly in
the past is refused (left in, it would hold its replicas again on the same date next year), and so
is one a year or more ahead (its date comes round this year first). A window longer than 31 days
is refused as a typo: a standing floor is the profile's minReplicas, not a sale.

Reads SCORING_SALE_CALENDAR, SCORING_PROFILE (default dev), SCORING_MIN_REPLICAS and
SCORING_MAX_REPLICAS (0 or unset: the profile's), and the profiles from main.bicep's
`var profiles` block; the replica bounds are resolved as main.bicep resolves them.
Standard library only: it runs with the Python the deploy already needs.

    SCORING_SALE_CALENDAR='[...]' python3 infra/hooks/sale_calendar.py
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

MAIN_BICEP = Path(__file__).resolve().parents[1] / "main.bicep"
# main.bicep parameter -> the azd variable main.parameters.json feeds it (tests/infra checks the two agree).
SETTINGS = {
    "saleCalendar": "SCORING_SALE_CALENDAR",
    "scoringProfile": "SCORING_PROFILE",
    "minReplicas": "SCORING_MIN_REPLICAS",
    "maxReplicas": "SCORING_MAX_REPLICAS",
}
FIELDS = ("start", "end", "timezone", "replicas")
LOCAL_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
MAX_WINDOW = timedelta(days=31)
EXAMPLE = '{"start": "2026-12-11T08:45", "end": "2026-12-11T11:00", "timezone": "Europe/London", "replicas": 30}'


class CalendarError(ValueError):
    """A calendar ARM or KEDA would take as it is and get wrong: the message names the fix."""


@dataclass(frozen=True)
class Bounds:
    """The replica bounds main.bicep deploys, and the profile's lead for a sale window."""

    profile: str
    min_replicas: int
    max_replicas: int
    lead_minutes: int


def read_profiles(bicep_text: str) -> dict[str, dict[str, int]]:
    """main.bicep's `var profiles = { name: { key: int ... } ... }`, read by anchored regexes."""
    block = re.search(r"^var profiles = \{\n(.*?)^\}", bicep_text, re.M | re.S)
    if not block:
        raise CalendarError("main.bicep has no `var profiles = {` block: cannot tell the profile's maxReplicas")
    profiles = {}
    for name, body in re.findall(r"^  (\w+): \{\n(.*?)^  \}", block.group(1), re.M | re.S):
        profiles[name] = {key: int(value) for key, value in re.findall(r"^    (\w+): (\d+)$", body, re.M)}
    return profiles


def resolve_bounds(environ: Mapping[str, str], profiles: Mapping[str, Mapping[str, int]]) -> Bounds:
    """scaleMinReplicas and scaleMaxReplicas as main.bicep computes them from the azd settings."""
    name = environ.get(SETTINGS["scoringProfile"]) or "dev"
    if name not in profiles:
        raise CalendarError(f"{SETTINGS['scoringProfile']} is {name!r}; main.bicep's profiles are {sorted(profiles)}")
    sizing = profiles[name]

    def override(variable: str) -> int:
        raw = environ.get(variable) or "0"
        if not raw.isdigit():
            raise CalendarError(f"{variable} is {raw!r}: a whole number (0: the profile's)")
        return int(raw)

    floor = max(2, override(SETTINGS["minReplicas"]) or sizing["minReplicas"])
    ceiling = max(floor, override(SETTINGS["maxReplicas"]) or sizing["maxReplicas"])
    return Bounds(name, floor, ceiling, sizing.get("saleLeadMinutes", 0))


def parse_calendar(text: str) -> list[dict[str, object]]:
    """The calendar's windows (empty text: none); the shape only, not the values."""
    if not text.strip():
        return []
    try:
        windows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CalendarError(
            f"SCORING_SALE_CALENDAR is not JSON ({exc.msg} at character {exc.pos}): set a list like [{EXAMPLE}]"
        ) from exc
    if not isinstance(windows, list):
        raise CalendarError(
            f"SCORING_SALE_CALENDAR is a JSON {type(windows).__name__}, not a list: wrap the window in [ ]: [{EXAMPLE}]"
        )
    for i, window in enumerate(windows):
        if not isinstance(window, dict):
            raise CalendarError(f"sale window {i} is {window!r}, not an object like {EXAMPLE}")
        missing = [f for f in FIELDS if f not in window]
        unknown = sorted(set(window) - set(FIELDS))
        if missing or unknown:
            raise CalendarError(
                f"sale window {i} {json.dumps(window)}: "
                + (f"missing {missing}" if missing else f"unknown fields {unknown}")
                + f"; a window has exactly {list(FIELDS)}, like {EXAMPLE}"
            )
    return windows


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones())


def _zone(i: int, name: object) -> ZoneInfo:
    if not _zones():
        raise CalendarError("this Python has no time zone database to check sale windows with: pip install tzdata")
    try:
        if not isinstance(name, str) or name not in _zones():
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CalendarError(
            f"sale window {i}: timezone {name!r} is not an IANA time zone: use a name like 'Europe/London' or 'America/New_York'"
        ) from exc


def _local(i: int, field: str, value: object, zone: ZoneInfo) -> datetime:
    if not isinstance(value, str) or not LOCAL_TIME.fullmatch(value):
        raise CalendarError(
            f'sale window {i}: {field} {value!r} is not a local time "YYYY-MM-DDTHH:MM" (like "2026-12-11T08:45", no seconds or offset)'
        )
    try:
        when = datetime.strptime(value, "%Y-%m-%dT%H:%M").replace(tzinfo=zone)
    except ValueError as exc:
        raise CalendarError(f"sale window {i}: {field} {value!r} is no date ({exc})") from exc
    if when.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != when.replace(tzinfo=None):
        raise CalendarError(
            f"sale window {i}: {field} {value} does not exist in {zone.key} (the clocks skip it): pick a time outside the change"
        )
    return when


def check_window(i: int, window: Mapping[str, object], bounds: Bounds, now: datetime) -> None:
    """Refuse a window KEDA would take wrongly; return quietly when it holds."""
    zone = _zone(i, window["timezone"])
    start = _local(i, "start", window["start"], zone)
    end = _local(i, "end", window["end"], zone)
    replicas = window["replicas"]
    if end <= start:
        raise CalendarError(
            f"sale window {i}: start {window['start']} is not before end {window['end']}: swap them, or fix the date"
        )
    if end - start > MAX_WINDOW:
        raise CalendarError(
            f"sale window {i}: {window['start']} to {window['end']} is {(end - start).days} days, over {MAX_WINDOW.days}: "
            "a sale window is hours; for a standing floor set SCORING_MIN_REPLICAS"
        )
    if end <= now:
        raise CalendarError(
            f"sale window {i}: it ended at {window['end']} {zone.key}: remove it (a cron rule has no year: "
            "left in, it would hold its replicas again on the same date next year)"
        )
    if _a_year_earlier(start) > now:
        raise CalendarError(
            f"sale window {i}: start {window['start']} is a year or more ahead: a cron rule has no year, so it would "
            "fire on this year's date first; add it within a year of the sale"
        )
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise CalendarError(f"sale window {i}: replicas {replicas!r} is not a whole number")
    if not 1 <= replicas <= bounds.max_replicas:
        raise CalendarError(
            f"sale window {i}: replicas {replicas} is outside 1..{bounds.max_replicas}, the maxReplicas of profile "
            f"{bounds.profile!r} (KEDA never goes past maxReplicas): lower it, or raise SCORING_MAX_REPLICAS"
            + (" or set SCORING_PROFILE sale" if bounds.profile != "sale" else "")
        )


def _a_year_earlier(when: datetime) -> datetime:
    try:
        return when.replace(year=when.year - 1)
    except ValueError:  # 29 February: the cron fires in leap years only
        return when.replace(year=when.year - 4)


def cron(local_time: str) -> str:
    """ "YYYY-MM-DDTHH:MM" as cron's "minute hour day month *" (app.bicep builds the same string)."""
    return f"{int(local_time[14:16])} {int(local_time[11:13])} {int(local_time[8:10])} {int(local_time[5:7])} *"


def cron_rules(windows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The KEDA rules app.bicep's `saleRules` builds from these windows, in the same shape."""
    return [
        {
            "name": f"sale-window-{i}",
            "custom": {
                "type": "cron",
                "metadata": {
                    "timezone": window["timezone"],
                    "start": cron(str(window["start"])),
                    "end": cron(str(window["end"])),
                    "desiredReplicas": str(window["replicas"]),
                },
            },
        }
        for i, window in enumerate(windows)
    ]


def check_calendar(text: str, bounds: Bounds, now: datetime) -> list[dict[str, object]]:
    """The rules for a calendar that holds; CalendarError for the first window that does not."""
    windows = parse_calendar(text)
    for i, window in enumerate(windows):
        check_window(i, window, bounds, now)
    return cron_rules(windows)


def main(environ: Mapping[str, str] = os.environ, bicep: Path = MAIN_BICEP) -> int:
    text = environ.get(SETTINGS["saleCalendar"], "")
    try:
        bounds = resolve_bounds(environ, read_profiles(bicep.read_text()))
        rules = check_calendar(text, bounds, datetime.now(UTC))
    except CalendarError as exc:
        print(f"error: sale calendar: {exc}", file=sys.stderr)
        return 1
    if not rules:
        print("sale calendar: no windows (SCORING_SALE_CALENDAR is empty)")
        return 0
    print(
        f"sale calendar: {len(rules)} window(s), profile {bounds.profile} (replicas {bounds.min_replicas}..{bounds.max_replicas}); the KEDA rules:"
    )
    for rule in rules:
        print(f"  {json.dumps(rule)}")
    if bounds.lead_minutes:
        print(
            f"  each window should open {bounds.lead_minutes} minutes before its burst (saleLeadMinutes of profile {bounds.profile}: docs/capacity.md)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
