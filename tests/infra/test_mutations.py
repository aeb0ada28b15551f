"""Mutation test (CONVENTIONS rule 17): break a scratch copy of the tree on purpose, one
mistake at a time, and require the checker for that class of mistake to report it.

The score is printed at the end of every run (conftest.py): `mutations caught N/N`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from checks import check_schemas
from checks.bicep_lang import check_language
from checks.grpc_ingress import check_grpc_ingress
from checks.contract import (
    check_admission,
    check_app_metrics,
    check_function_app,
    check_lock_budget,
    check_logging_feeds_alerts,
    check_metrics,
    check_override_api_version,
    check_roles,
)
from conftest import REPO, TRIGGER_QUEUE, app_setting_names

SCORE: dict[str, int] = {"caught": 0, "total": 0}

CHECKS: dict[str, Callable[[Path], list[str]]] = {
    "schema": check_schemas,
    "language": lambda root: check_language(root / "infra"),
    "roles": check_roles,
    "metrics": check_metrics,
    "app_metrics": check_app_metrics,
    "logging": check_logging_feeds_alerts,
    "locks": lambda root: check_lock_budget(root, TRIGGER_QUEUE),
    "admission": check_admission,
    "function_app": lambda root: check_function_app(root, app_setting_names()),
    "override_version": check_override_api_version,
    "grpc_ingress": check_grpc_ingress,
}

# (id, check that must catch it, file, text, replacement)
MUTATIONS = [
    ("wrong-api-version", "schema", "infra/modules/app.bicep", "containerApps@2026-07-01", "containerApps@2026-07-15"),
    ("misspelled-property", "schema", "infra/modules/app.bicep", "targetPort: port", "targetPrt: port"),
    (
        "misspelled-patch-property",
        "schema",
        "infra/modules/app.bicep",
        "type: 'azure-servicebus'",
        "tpye: 'azure-servicebus'",
    ),
    (
        "misspelled-keda-metadata",
        "schema",
        "infra/modules/app.bicep",
        "messageCount: string(",
        "messagesCount: string(",
    ),
    (
        "bad-enum-value",
        "schema",
        "infra/modules/app.bicep",
        "activeRevisionsMode: 'Single'",
        "activeRevisionsMode: 'Singel'",
    ),
    (
        "word-for-bool-property",
        "schema",
        "infra/modules/servicebus.bicep",
        "requiresSession: false",
        "requiresSession: 'no'",
    ),
    (
        "string-for-int-property",
        "schema",
        "infra/modules/servicebus.bicep",
        "maxDeliveryCount: 10",
        "maxDeliveryCount: '10'",
    ),
    (
        "wrong-role-guid",
        "roles",
        "infra/modules/registry.bicep",
        "7f951dda-4ed3-4680-a7ca-43fe172d538d",
        "7f951dff-4ed1-466b-ab4c-45d7cd81f3da",
    ),
    (
        "excess-privilege",
        "roles",
        "infra/modules/servicebus.bicep",
        "roleDefinitions', receiverRoleId)",
        "roleDefinitions', ownerRoleId)",
    ),
    ("role-on-wrong-scope", "roles", "infra/modules/monitoring.bicep", "scope: appInsights", "scope: workspace"),
    ("undefined-symbol", "language", "infra/main.bicep", "take('st${token}', 24)", "take('st${tokn}', 24)"),
    ("unknown-function", "language", "infra/main.bicep", "toLower(uniqueString(", "toLower(uniqueStrng("),
    (
        "string-literal-to-int-param",
        "language",
        "infra/main.bicep",
        "httpConcurrentRequests: httpConcurrentRequests",
        "httpConcurrentRequests: '14'",
    ),
    (
        "unknown-module-param",
        "language",
        "infra/main.bicep",
        "    serviceBusFqdn: serviceBus",
        "    serviceBusFqdns: serviceBus",
    ),
    ("unknown-module-output", "language", "infra/main.bicep", "app.outputs.scale", "app.outputs.scales"),
    (
        "int-of-decimal-string",
        "language",
        "infra/main.bicep",
        "max(1, int(first(split(replicaCpu, '.'))))",
        "int(replicaCpu)",
    ),
    (
        "wrong-metric-name",
        "metrics",
        "infra/modules/alerts.bicep",
        "metricName: 'ActiveMessages'",
        "metricName: 'ActiveMessage'",
    ),
    (
        "wrong-metric-in-query",
        "metrics",
        "infra/modules/alerts.bicep",
        "MetricName == \\'DeadletteredMessages\\'",
        "MetricName == \\'DeadLetteredMessage\\'",
    ),
    (
        "alert-reads-a-metric-nobody-emits",
        "app_metrics",
        "infra/modules/alerts.bicep",
        "param queueAgeMetricName string = 'scoring.queue.message.age'",
        "param queueAgeMetricName string = 'queue_age_ms'",
    ),
    (
        "app-renames-the-alerted-metric",
        "app_metrics",
        "shared/telemetry/catalogue.py",
        '"scoring.queue.message.age",',
        '"scoring.queue.age",',
    ),
    (
        "seconds-compared-as-ms",
        "app_metrics",
        "infra/modules/alerts.bicep",
        "age_ms = 1000.0 * max(valueMax)",
        "age_ms = max(valueMax)",
    ),
    ("log-level-hides-requests", "logging", "host.json", '"Host.Results": "Information"', '"Host.Results": "Error"'),
    ("requests-sampled", "logging", "host.json", '"excludedTypes": "Request"', '"excludedTypes": "Exception"'),
    (
        "lock-renewal-shorter-than-timeout",
        "locks",
        "host.json",
        '"maxAutoLockRenewalDuration": "00:05:00"',
        '"maxAutoLockRenewalDuration": "00:01:00"',
    ),
    (
        "prefetched-locks-expire",
        "locks",
        "host.json",
        '"prefetchCount": 0',
        '"prefetchCount": 128',
    ),
    (
        "lock-longer-than-service-max",
        "locks",
        "infra/modules/servicebus.bicep",
        "lockDuration string = 'PT30S'",
        "lockDuration string = 'PT10M'",
    ),
    (
        "host-runs-fewer-than-the-app-admits",
        "admission",
        "host.json",
        '"maxConcurrentRequests": 100',
        '"maxConcurrentRequests": 8',
    ),
    (
        "host-queue-too-long",
        "admission",
        "host.json",
        '"maxOutstandingRequests": 200',
        '"maxOutstandingRequests": 2000',
    ),
    (
        "app-admits-more-than-the-host-runs",
        "admission",
        "infra/modules/app.bicep",
        "{ name: 'MAX_INFLIGHT', value: '16' }",
        "{ name: 'MAX_INFLIGHT', value: '200' }",
    ),
    (
        "azd-api-version-drifts",
        "override_version",
        "azure.yaml",
        'apiVersion: "2026-07-01"',
        'apiVersion: "2025-01-01"',
    ),
    (
        "hook-api-version-drifts",
        "override_version",
        "infra/hooks/keda-scale-rules.sh",
        'API_VERSION="2026-07-01"',
        'API_VERSION="2025-01-01"',
    ),
    (
        "wrong-queue-name",
        "function_app",
        "infra/modules/servicebus.bicep",
        "param inputQueueName string = 'payments'",
        "param inputQueueName string = 'payment'",
    ),
    (
        "wrong-output-queue",
        "function_app",
        "shared/queue/handler.py",
        'COMPLETED_QUEUE = "risk-completed"',
        'COMPLETED_QUEUE = "risk-complete"',
    ),
    (
        "wrong-webhook-function",
        "function_app",
        "infra/hooks/eventgrid-subscription.sh",
        "BLOB_TRIGGER_FUNCTION:-model_blob}",
        "BLOB_TRIGGER_FUNCTION:-models_blob}",
    ),
    (
        "wrong-connection-name",
        "function_app",
        "infra/modules/app.bicep",
        "'ServiceBusConnection__fullyQualifiedNamespace'",
        "'ServiceBus__fullyQualifiedNamespace'",
    ),
    ("missing-app-setting", "function_app", "infra/modules/app.bicep", "{ name: 'BATCH_MAX_SIZE', value: '8' }", ""),
    ("grpc-port-public", "grpc_ingress", "infra/modules/app.bicep", "external: false", "external: true"),
    (
        "fast-lane-port-public",  # only the lane's mapping: the unkeyed data plane must stay inside the environment
        "grpc_ingress",
        "infra/modules/app.bicep",
        "external: false\n            targetPort: fastLanePort",
        "external: true\n            targetPort: fastLanePort",
    ),
    (
        "grpc-port-not-the-setting",
        "grpc_ingress",
        "infra/modules/app.bicep",
        "targetPort: grpcPort",
        "targetPort: 8002",
    ),
    (
        "grpc-setting-missing",
        "grpc_ingress",
        "infra/modules/app.bicep",
        "{ name: 'GRPC_PORT', value: string(grpcPort) }",
        "",
    ),
    (
        "fast-lane-setting-missing",
        "grpc_ingress",
        "infra/modules/app.bicep",
        "{ name: 'FAST_LANE_PORT', value: string(fastLanePort) }",
        "",
    ),
    (
        "fast-lane-exposed-elsewhere",
        "grpc_ingress",
        "infra/modules/app.bicep",
        "targetPort: fastLanePort\n            exposedPort: fastLanePort",
        "targetPort: fastLanePort\n            exposedPort: 8443",
    ),
    ("misspelled-port-mapping", "schema", "infra/modules/app.bicep", "exposedPort: grpcPort", "exposedPrt: grpcPort"),
    (
        "probe-off-health-route",
        "function_app",
        "infra/modules/app.bicep",
        "path: '/api/health/ready'",
        "path: '/health/ready'",
    ),
]

COPIED = (
    "infra",
    "host.json",
    "function_app.py",
    "azure.yaml",
    "shared/queue/handler.py",
    "shared/telemetry/catalogue.py",
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    for name in COPIED:
        src = REPO / name
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    return root


@pytest.mark.parametrize(
    ("check", "file", "text", "replacement"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS]
)
def test_mutation_is_caught(pristine: Path, tmp_path: Path, check: str, file: str, text: str, replacement: str) -> None:
    root = tmp_path / "tree"
    shutil.copytree(pristine, root)
    target = root / file
    source = target.read_text()
    assert source.count(text) >= 1, f"mutation target {text!r} no longer in {file}: update MUTATIONS"
    assert CHECKS[check](root) == [], f"the {check} check must pass on the unmutated copy"
    target.write_text(source.replace(text, replacement))
    SCORE["total"] += 1
    findings = CHECKS[check](root)
    if findings:
        SCORE["caught"] += 1
    assert findings, f"the {check} check missed: {file}: {text!r} -> {replacement!r}"


def test_every_class_of_mistake_has_a_mutation() -> None:
    assert set(CHECKS) == {m[1] for m in MUTATIONS}
