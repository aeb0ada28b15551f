"""The infra reader against the real files, and against copies broken on purpose (a mutation test).

bench/flashsale/infra.py reads a few values with anchored patterns instead of a Bicep parser
(pycep-parser lives in .venv-infra only). Each case below changes one thing in a copy of infra/
and host.json: a value the simulation must follow is followed, and a rule that no longer reads
its parameter, or a value that is gone, stops the reader instead of letting it guess.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.flashsale.infra import PLATFORM, InfraReadError, read_profiles, read_scale_rules

REPO = Path(__file__).resolve().parents[2]
APP, MAIN, PARAMS = "infra/modules/app.bicep", "infra/main.bicep", "infra/main.parameters.json"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "infra", tmp_path / "infra")
    shutil.copy(REPO / "host.json", tmp_path / "host.json")
    return tmp_path


def edit(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    text = path.read_text()
    assert old in text, f"the mutation's anchor {old!r} is not in {name}: update this test"
    path.write_text(text.replace(old, new, 1))


def test_the_real_files_are_read() -> None:
    rules = read_scale_rules()
    main, app = (REPO / MAIN).read_text(), (REPO / APP).read_text()
    host = json.loads((REPO / "host.json").read_text())["extensions"]
    profile = read_profiles()[rules.profile]
    assert rules.profile == "dev" and "${SCORING_PROFILE=dev}" in (REPO / PARAMS).read_text()
    assert (rules.http_concurrent_requests, rules.queue_messages_per_replica) == (
        profile["httpConcurrentRequests"], profile["queueMessagesPerReplica"],
    )  # fmt: skip
    assert (rules.min_replicas, rules.max_replicas) == (profile["minReplicas"], profile["maxReplicas"])
    assert "var sizing = profiles[scoringProfile]" in main
    assert f"{{ name: 'MAX_INFLIGHT', value: '{rules.max_inflight}' }}" in app
    assert rules.max_message_batch == host["serviceBus"]["maxMessageBatchSize"]
    assert rules.host_max_outstanding == host["http"]["maxOutstandingRequests"]
    assert "${SCORING_MIN_REPLICAS=0}" in (REPO / PARAMS).read_text()  # NOTE: 0: the profile's
    assert 2 <= rules.min_replicas <= rules.max_replicas
    # NOTE: the scale block sets neither, so the platform's documented defaults apply
    assert not re.search(r"pollingInterval|cooldownPeriod", app)
    assert (rules.polling_interval_s, rules.cooldown_s) == (PLATFORM.polling_interval_s, PLATFORM.cooldown_s)


@pytest.mark.parametrize(
    ("name", "old", "new", "field", "value"),
    [
        (
            PARAMS,
            "${SCORING_HTTP_CONCURRENT_REQUESTS=0}",
            "${SCORING_HTTP_CONCURRENT_REQUESTS=30}",
            "http_concurrent_requests",
            30,
        ),
        (
            PARAMS,
            "${SCORING_QUEUE_MESSAGES_PER_REPLICA=0}",
            "${SCORING_QUEUE_MESSAGES_PER_REPLICA=7}",
            "queue_messages_per_replica",
            7,
        ),
        (PARAMS, "${SCORING_MIN_REPLICAS=0}", "${SCORING_MIN_REPLICAS=5}", "min_replicas", 5),
        (PARAMS, "${SCORING_MIN_REPLICAS=0}", "${SCORING_MIN_REPLICAS=1}", "min_replicas", 2),
        (PARAMS, "${SCORING_MAX_REPLICAS=0}", "${SCORING_MAX_REPLICAS=40}", "max_replicas", 40),
        (PARAMS, "${SCORING_PROFILE=dev}", "${SCORING_PROFILE=sale}", "profile", "sale"),
        (APP, "param cpuScaleUtilization int = 70", "param cpuScaleUtilization int = 55", "cpu_utilization_pct", 55),
        (APP, "  rules: scaleRules\n", "  pollingInterval: 10\n  rules: scaleRules\n", "polling_interval_s", 10.0),
        (APP, "  rules: scaleRules\n", "  cooldownPeriod: 120\n  rules: scaleRules\n", "cooldown_s", 120.0),
        (APP, "{ name: 'MAX_QUEUED', value: '64' }", "{ name: 'MAX_QUEUED', value: '8' }", "max_queued", 8),
        (MAIN, "var replicasPerNode = 3", "var replicasPerNode = 4", "replicas_per_node", 4),
        ("host.json", '"maxMessageBatchSize": 64', '"maxMessageBatchSize": 16', "max_message_batch", 16),
    ],
)
def test_a_changed_value_is_what_the_simulation_follows(
    copy: Path, name: str, old: str, new: str, field: str, value: float | str
) -> None:
    edit(copy, name, old, new)
    assert getattr(read_scale_rules(copy), field) == value


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        (APP, "concurrentRequests: string(httpConcurrentRequests)", "concurrentRequests: '50'"),
        (APP, "messageCount: string(queueMessagesPerReplica)", "messageCount: '5'"),
        (APP, "name: 'payments-queue-depth'", "name: 'payments-depth'"),
        (APP, "name: 'http-concurrency'", "name: 'http-rule'"),
        (APP, "value: string(cpuScaleUtilization)", "value: '90'"),
        (APP, "  rules: scaleRules\n", "  rules: []\n"),
        (APP, "{ name: 'MAX_INFLIGHT', value: '16' }", "{ name: 'MAX_INFLIGHT_X', value: '16' }"),
        (MAIN, "var profiles = {", "var sizes = {"),
        (MAIN, "    saleLeadMinutes:", "    leadMinutes:"),
        (APP, "var scaleRules = concat(baseRules, saleRules)", "var scaleRules = baseRules"),
        (PARAMS, "${SCORING_PROFILE=dev}", "${SCORING_PROFILE=gold}"),
        (PARAMS, "${SCORING_MIN_REPLICAS=0}", "${SCORING_MIN_REPLICAS}"),
        ("host.json", '"maxOutstandingRequests": 200', '"maxOutstanding": 200'),
        (APP, "type: 'Readiness'", "type: 'Ready'"),
    ],
)
def test_a_rule_or_value_that_is_gone_stops_the_reader(copy: Path, name: str, old: str, new: str) -> None:
    edit(copy, name, old, new)
    with pytest.raises(InfraReadError):
        read_scale_rules(copy)


def test_a_profile_rewritten_is_what_the_simulation_follows(copy: Path) -> None:
    from bench.flashsale.__main__ import write_profile
    from bench.flashsale.capacity import Profile

    write_profile("sale", Profile(7, 31, 900, 25, 29, 20), copy)
    rules = read_scale_rules(copy, profile="sale")
    assert (rules.min_replicas, rules.max_replicas, rules.http_concurrent_requests) == (7, 31, 900)
    assert (rules.queue_messages_per_replica, rules.sale_replicas, rules.sale_lead_s) == (25, 29, 1200.0)
    assert read_scale_rules(copy, profile="dev") == read_scale_rules(profile="dev")
