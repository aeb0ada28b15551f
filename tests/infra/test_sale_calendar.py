"""app.bicep's cron strings are the preprovision hook's: the Bicep expression, evaluated on the
real app.bicep text, yields what infra/hooks/sale_calendar.py checked and printed, for every
field width; and an offset moved in the Bicep is seen."""

from __future__ import annotations

import itertools

import pytest
from checks.parsing import parse_text
from checks.sale_rules import SAMPLE_WINDOWS, bicep_sale_rules, check_sale_rules, evaluate, hook_module
from conftest import INFRA, REPO

APP = INFRA / "modules" / "app.bicep"


def _windows() -> list[dict[str, object]]:
    """Single- and double-digit minutes, hours, days and months, at both ends of each range."""
    windows = []
    for i, (month, day, hour, minute) in enumerate(
        itertools.product((1, 9, 10, 12), (1, 9, 10, 31), (0, 9, 23), (0, 5, 59))
    ):
        start = f"2027-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}"
        windows.append({"start": start, "end": start, "timezone": "Asia/Kolkata", "replicas": i + 1})
    return windows


def test_app_bicep_builds_the_cron_strings_the_hook_prints() -> None:
    windows = _windows()
    assert bicep_sale_rules(parse_text(APP.read_text()), windows) == hook_module(REPO).cron_rules(windows)


def test_the_checker_finds_nothing_wrong_with_the_real_tree() -> None:
    assert check_sale_rules(REPO) == []


@pytest.mark.parametrize(
    ("original", "moved"),
    [
        ("substring(window.start, 14, 2)", "substring(window.start, 13, 2)"),  # a malformed number: ARM fails
        ("substring(window.start, 11, 2)", "substring(window.start, 8, 2)"),  # the hour read from the day
        ("substring(window.end, 5, 2)", "substring(window.end, 8, 2)"),  # the month read from the day
    ],
)
def test_an_offset_moved_in_app_bicep_changes_what_it_builds(original: str, moved: str) -> None:
    text = APP.read_text()
    assert text.count(original) == 1, f"{original!r} is no longer in app.bicep: update this test"
    windows = _windows()
    wanted = hook_module(REPO).cron_rules(windows)
    try:
        built = bicep_sale_rules(parse_text(text.replace(original, moved)), windows)
    except ValueError:
        return  # the evaluator refuses it as ARM would (int() of a non-integer)
    assert built != wanted


def test_the_evaluator_follows_bicep_int_and_substring() -> None:
    scope = {"window": dict(SAMPLE_WINDOWS[0])}
    assert evaluate("int(substring(window.start, 14, 2))", scope) == 45
    assert evaluate("int(substring(window.start, 5, 2))", scope) == 12
    assert evaluate("string(window.replicas)", scope) == "30"
    with pytest.raises(ValueError, match="integer strings only"):
        evaluate("int(substring(window.start, 13, 2))", scope)
    with pytest.raises(ValueError, match="past the end"):
        evaluate("substring(window.start, 15, 2)", scope)
    with pytest.raises(ValueError, match="unknown symbol"):
        evaluate("int(substring(windw.start, 14, 2))", scope)
