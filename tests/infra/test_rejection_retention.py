"""The rejection queue keeps raw bodies (user ids, notes) for days, not for ever: an expired message
is deleted, and its dead letters, which Service Bus never expires (docs/platform.md P69), are
forwarded to a queue where the same TTL applies. Checked on servicebus.bicep and on copies broken
on purpose (rule 17)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import INFRA, Module
from test_data_services import _queue_properties

MAX_DAYS = 7


def _days(sb: Module, value: Any) -> int | None:
    match = re.fullmatch(r"P(\d+)D", str(sb.resolve(value)))
    return int(match[1]) if match else None


def rejection_findings(servicebus_bicep: Path) -> list[str]:
    sb = Module(servicebus_bicep)
    queues = dict(_queue_properties(sb))
    rejected, sink = sb.params["rejectionQueueName"]["default"], sb.params["rejectedDeadLettersName"]["default"]
    findings = []
    for name in (rejected, sink):
        props = queues.get(name)
        if props is None:
            findings.append(f"no queue {name}")
            continue
        days = _days(sb, props.get("defaultMessageTimeToLive"))
        if days is None or days > MAX_DAYS:
            findings.append(f"{name}: a TTL of at most {MAX_DAYS} days, got {props.get('defaultMessageTimeToLive')!r}")
        if props.get("deadLetteringOnMessageExpiration") is not False:
            findings.append(f"{name}: an expired message must be deleted, not dead-lettered (kept for ever)")
    forward = queues.get(rejected, {}).get("forwardDeadLetteredMessagesTo")
    if not (isinstance(forward, dict) and "rejectedDeadLetters" in str(forward)):
        findings.append(f"{rejected}: its dead letters must be forwarded to {sink}, got {forward!r}")
    return findings


def test_rejections_and_their_dead_letters_expire() -> None:
    assert rejection_findings(INFRA / "modules" / "servicebus.bicep") == []


def test_results_still_dead_letter_when_they_expire() -> None:
    queues = dict(_queue_properties(Module(INFRA / "modules" / "servicebus.bicep")))
    assert queues["risk-completed"]["deadLetteringOnMessageExpiration"] is True
    assert queues["risk-completed"]["forwardDeadLetteredMessagesTo"] is None


@pytest.mark.parametrize(
    ("text", "replacement"),
    [
        ("deadLetteringOnMessageExpiration: queueName != rejectionQueueName", "deadLetteringOnMessageExpiration: true"),
        ("param rejectionTtl string = 'P3D'", "param rejectionTtl string = 'P365D'"),
        ("    forwardDeadLetteredMessagesTo: (queueName == rejectionQueueName) ? rejectedDeadLetters.name : null\n", ""),
        ("    deadLetteringOnMessageExpiration: false\n    defaultMessageTimeToLive: rejectionTtl",
         "    deadLetteringOnMessageExpiration: true\n    defaultMessageTimeToLive: rejectionTtl"),
        ("    defaultMessageTimeToLive: rejectionTtl\n", "    defaultMessageTimeToLive: 'P3650D'\n"),
    ],
)  # fmt: skip
def test_each_broken_retention_is_caught(tmp_path: Path, text: str, replacement: str) -> None:
    source = (INFRA / "modules" / "servicebus.bicep").read_text()
    assert source.count(text) == 1, text
    broken = tmp_path / "servicebus.bicep"
    broken.write_text(source.replace(text, replacement))
    assert rejection_findings(broken), f"not caught: {replacement or 'removed'}"
