"""Mutation test (CONVENTIONS rule 17): break a scratch copy of the tree on purpose, one
mistake at a time, and require the checker for that class of mistake to report it.

The score is printed at the end of every run (conftest.py): `mutations caught N/N`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from checks import CHECKS as DEFINED
from conftest import REPO, TRIGGER_QUEUE, app_setting_names

SCORE: dict[str, int] = {"caught": 0, "total": 0}

ADAPTED: dict[str, Callable[[Path], list[str]]] = {
    "language": lambda root: DEFINED["language"](root / "infra"),
    "locks": lambda root: DEFINED["locks"](root, TRIGGER_QUEUE),
    "function_app": lambda root: DEFINED["function_app"](root, app_setting_names()),
}
CHECKS: dict[str, Callable[[Path], list[str]]] = {name: ADAPTED.get(name, check) for name, check in DEFINED.items()}

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
        "httpConcurrentRequests: scaleHttpRequests",
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
    # telemetry (P15, P16, P17): the host's own spans feed `requests`, sampled by OTEL_TRACES_SAMPLER
    (
        "inert-appinsights-sampling-in-otel-mode",
        "logging",
        "host.json",
        '"logLevel": {',
        '"applicationInsights": {"samplingSettings": {"isEnabled": true, "excludedTypes": "Request"}},\n    "logLevel": {',
    ),
    (
        "host-sampler-unset",
        "logging",
        "infra/modules/app.bicep",
        "{ name: 'OTEL_TRACES_SAMPLER', value: 'microsoft.rate_limited' }",
        "",
    ),
    (
        "host-sampler-misnamed",
        "logging",
        "infra/modules/app.bicep",
        "value: 'microsoft.rate_limited'",
        "value: 'traceidratio'",
    ),
    (
        "sampled-requests-counted",
        "logging",
        "infra/modules/alerts.bicep",
        "metricMeasureColumn: 'pct_5xx'",
        "metricMeasureColumn: 'failed'",
    ),
    (
        "telemetry-mode-back-to-application-insights",  # then the SDK's adaptive sampling applies
        "logging",
        "host.json",
        '"telemetryMode": "OpenTelemetry"',
        '"telemetryMode": "ApplicationInsights"',
    ),
    # locks (P1-P7): nothing renews a batch's locks
    (
        "lock-shorter-than-the-batch",
        "locks",
        "infra/modules/servicebus.bicep",
        "lockDuration string = 'PT2M'",
        "lockDuration string = 'PT30S'",
    ),
    (
        "batch-budget-past-the-lock",
        "locks",
        "infra/modules/app.bicep",
        "{ name: 'QUEUE_BATCH_BUDGET_MS', value: '60000' }",
        "{ name: 'QUEUE_BATCH_BUDGET_MS', value: '100000' }",
    ),
    (
        "batch-budget-unset",
        "locks",
        "infra/modules/app.bicep",
        "{ name: 'QUEUE_BATCH_BUDGET_MS', value: '60000' }",
        "",
    ),
    (
        "inert-lock-renewal-believed",
        "locks",
        "host.json",
        '"prefetchCount": 0,',
        '"prefetchCount": 0,\n      "maxAutoLockRenewalDuration": "00:05:00",',
    ),
    (
        "inert-concurrent-calls-believed",
        "locks",
        "host.json",
        '"prefetchCount": 0,',
        '"prefetchCount": 0,\n      "maxConcurrentCalls": 32,',
    ),
    (
        "timeout-shorter-than-the-budget",
        "locks",
        "host.json",
        '"functionTimeout": "00:02:00"',
        '"functionTimeout": "00:00:45"',
    ),
    (
        "batch-wait-holds-locks",
        "locks",
        "host.json",
        '"prefetchCount": 0,',
        '"prefetchCount": 0,\n      "minMessageBatchSize": 32,\n      "maxBatchWaitTime": "00:00:45",',
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
        "lockDuration string = 'PT2M'",
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
        "wrong-outcomes-queue",
        "function_app",
        "infra/modules/servicebus.bicep",
        "param outcomesQueueName string = 'risk-outcomes'",
        "param outcomesQueueName string = 'outcomes'",
    ),
    (
        "outcomes-rule-on-the-payments-queue",
        "function_app",
        "infra/modules/app.bicep",
        "queueName: outcomesQueueName",
        "queueName: inputQueueName",
    ),
    (
        "outcomes-trigger-renamed",
        "function_app",
        "function_app.py",
        'queue_name="risk-outcomes"',
        'queue_name="risk-outcome"',
    ),
    (
        "wrong-output-queue",
        "function_app",
        "shared/adapters/queue/handler.py",
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
    (
        "app-setting-nothing-reads",  # a setting the code no longer reads (the removed fast lane's)
        "function_app",
        "infra/modules/app.bicep",
        "{ name: 'GRPC_PORT', value: string(grpcPort) }",
        "{ name: 'GRPC_PORT', value: string(grpcPort) }\n  { name: 'FAST_LANE_PORT', value: '8081' }",
    ),
    ("grpc-port-public", "grpc_ingress", "infra/modules/app.bicep", "external: false", "external: true"),
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
    ("grpc-exposed-elsewhere", "grpc_ingress", "infra/modules/app.bicep", "exposedPort: grpcPort", "exposedPort: 8443"),
    (
        "port-mapped-that-nothing-serves",  # an additional port with no server behind it (the removed fast lane's 8081)
        "grpc_ingress",
        "infra/modules/app.bicep",
        "            exposedPort: grpcPort\n          }\n",
        "            exposedPort: grpcPort\n          }\n          {\n            external: false\n"
        "            targetPort: 8081\n            exposedPort: 8081\n          }\n",
    ),
    ("misspelled-port-mapping", "schema", "infra/modules/app.bicep", "exposedPort: grpcPort", "exposedPrt: grpcPort"),
    # probes (P8, P9, P10)
    (
        "liveness-behind-the-throttle",
        "probes",
        "infra/modules/app.bicep",
        "path: '/admin/host/ping'",
        "path: '/api/health/live'",
    ),
    (
        "liveness-on-a-keyed-admin-route",
        "probes",
        "infra/modules/app.bicep",
        "path: '/admin/host/ping'",
        "path: '/admin/host/status'",
    ),
    # the ports the host never sees (P13, P14, P23)
    ("extra-ports-unscaled", "extra_ports", "infra/modules/app.bicep", "type: 'cpu'", "type: 'azure-queue'"),
    (
        "extra-ports-unalerted",
        "extra_ports",
        "infra/modules/alerts.bicep",
        "customMetrics | where name == \\'scoring.requests.shed\\'",
        "customMetrics | where name == \\'scoring.events\\'",
    ),
    (
        "cpu-rule-misspelt",
        "schema",
        "infra/modules/app.bicep",
        "value: string(cpuScaleUtilization)",
        "target: string(cpuScaleUtilization)",
    ),
    # the GPU build (P20)
    (
        "gpu-build-arg-missing",
        "gpu_build",
        "azure.yaml",
        "        - ORT_GPU=${SCORING_ENABLE_GPU/true/1}\n",
        "        - UNUSED=1\n",
    ),
    (
        "gpu-build-arg-not-the-dockerfile-value",
        "gpu_build",
        "azure.yaml",
        "ORT_GPU=${SCORING_ENABLE_GPU/true/1}",
        "ORT_GPU=${SCORING_ENABLE_GPU}",
    ),
    (
        "gpu-not-required-on-the-gpu",
        "gpu_build",
        "infra/modules/app.bicep",
        "{ name: 'ORT_REQUIRE_GPU', value: useGpu ? 'true' : 'false' }",
        "{ name: 'ORT_REQUIRE_GPU', value: 'false' }",
    ),
    # moving between workload profiles (P22)
    (
        "gpu-move-drops-the-cpu-pool",
        "profile_moves",
        "infra/modules/environment.bicep",
        "var hasCpuPool = !enableGpu || keepCpuPool",
        "var hasCpuPool = !enableGpu",
    ),
    (
        "cpu-move-drops-the-gpu-profile",
        "profile_moves",
        "infra/modules/environment.bicep",
        "var hasGpuProfile = enableGpu || keepGpuProfile",
        "var hasGpuProfile = enableGpu",
    ),
    (
        "app-on-a-profile-never-listed",
        "profile_moves",
        "infra/modules/environment.bicep",
        "var hasGpuProfile = enableGpu || keepGpuProfile",
        "var hasGpuProfile = keepGpuProfile",
    ),
    # azd hooks on Windows (P21)
    (
        "windows-skips-the-hooks",
        "windows_hooks",
        "azure.yaml",
        "    windows:\n      shell: pwsh\n      run: ./infra/hooks/postdeploy.ps1\n",
        "",
    ),
    (
        "probe-off-health-route",
        "function_app",
        "infra/modules/app.bicep",
        "path: '/api/health/ready'",
        "path: '/health/ready'",
    ),
    # the two Redis roles (P41, P42): the cache may evict predictions; Feast's store nothing
    (
        "feast-store-evicts-any-key",
        "redis_stores",
        "infra/main.bicep",
        "evictionPolicy: 'NoEviction'",
        "evictionPolicy: 'AllKeysLRU'",
    ),
    (
        "feast-store-evicts-keys-with-a-ttl",  # the cache's policy: Feast's key_ttl_seconds hashes go
        "redis_stores",
        "infra/main.bicep",
        "    evictionPolicy: 'NoEviction'\n",
        "",
    ),
    (
        "cache-redis-oss-clustering",  # the native layout's MGET: CROSSSLOT
        "redis_stores",
        "infra/modules/redis.bicep",
        "clusteringPolicy: 'EnterpriseCluster'",
        "clusteringPolicy: 'OSSCluster'",
    ),
    (
        "cache-redis-evicts-features",
        "redis_stores",
        "infra/modules/redis.bicep",
        "param evictionPolicy string = 'VolatileLRU'",
        "param evictionPolicy string = 'AllKeysLRU'",
    ),
    (
        "feast-url-points-at-the-cache",
        "redis_stores",
        "infra/main.bicep",
        "'rediss://${feastRedis.outputs.hostName}:${feastRedis.outputs.port}'",
        "'rediss://${redis.outputs.hostName}:${redis.outputs.port}'",
    ),
    (
        "feast-url-not-set-when-deployed",
        "redis_stores",
        "infra/main.bicep",
        "feastRedisUrl: deployFeastRedis ? 'rediss://${feastRedis.outputs.hostName}:${feastRedis.outputs.port}' : feastRedisUrl",
        "feastRedisUrl: feastRedisUrl",
    ),
    (
        "feast-redis-on-by-default",  # today's deployments would gain a cluster
        "redis_stores",
        "infra/main.bicep",
        "param deployFeastRedis bool = false",
        "param deployFeastRedis bool = true",
    ),
    (
        "feast-redis-not-provisioned",
        "redis_stores",
        "infra/main.bicep",
        "module feastRedis 'modules/redis.bicep' = if (deployFeastRedis) {",
        "module feastRedis 'modules/openai.bicep' = if (deployFeastRedis) {",
    ),
    # the prediction log (P43, P44): an append-only container the app writes, and the drift alerts
    (
        "prediction-log-off",
        "prediction_log",
        "infra/modules/app.bicep",
        "{ name: 'PREDICTION_LOG', value: 'blob' }",
        "{ name: 'PREDICTION_LOG', value: 'off' }",
    ),
    (
        "prediction-log-container-not-passed",
        "prediction_log",
        "infra/main.bicep",
        "predictionsContainerName: storage.outputs.predictionsContainerName",
        "predictionsContainerName: storage.outputs.modelsContainerName",
    ),
    (
        "prediction-log-container-hard-coded",
        "prediction_log",
        "infra/modules/app.bicep",
        "{ name: 'PREDICTION_LOG_CONTAINER', value: predictionsContainerName }",
        "{ name: 'PREDICTION_LOG_CONTAINER', value: 'predictions' }",
    ),
    (
        "prediction-log-without-worm",
        "prediction_log",
        "infra/modules/storage.bicep",
        "parent: predictionsContainer\n  name: 'default'",
        "parent: modelsContainer\n  name: 'default'",
    ),
    (
        "prediction-log-refuses-appends",
        "prediction_log",
        "infra/modules/storage.bicep",
        "allowProtectedAppendWrites: true",
        "allowProtectedAppendWrites: false",
    ),
    (
        "prediction-log-appends-all",
        "prediction_log",
        "infra/modules/storage.bicep",
        "allowProtectedAppendWrites: true",
        "allowProtectedAppendWrites: true\n    allowProtectedAppendWritesAll: true",
    ),
    (
        "prediction-log-immutable-for-no-day",
        "prediction_log",
        "infra/modules/storage.bicep",
        "param predictionRetentionDays int = 180",
        "param predictionRetentionDays int = 0",
    ),
    (
        "worm-beside-point-in-time-restore",
        "prediction_log",
        "infra/modules/storage.bicep",
        "    isVersioningEnabled: true\n",
        "    isVersioningEnabled: true\n    restorePolicy: {\n      enabled: true\n      days: 6\n    }\n",
    ),
    (
        "prediction-writer-on-the-account",
        "roles",
        "infra/modules/storage.bicep",
        "scope: predictionsContainer",
        "scope: account",
    ),
    (
        "drift-alert-reads-a-metric-nobody-emits",
        "app_metrics",
        "infra/modules/alerts.bicep",
        "name == \\'scoring.drift.psi\\'",
        "name == \\'scoring.drift\\'",
    ),
    (
        "misspelled-worm-property",
        "schema",
        "infra/modules/storage.bicep",
        "immutabilityPeriodSinceCreationInDays:",
        "immutabilityPeriodInDays:",
    ),
    # the sale calendar's KEDA cron rules (P80, P11)
    ("cron-rule-without-a-timezone", "sale_rules", "infra/modules/app.bicep", "      timezone: window.timezone\n", ""),
    (
        "cron-replicas-not-from-the-window",
        "sale_rules",
        "infra/modules/app.bicep",
        "desiredReplicas: string(window.replicas)",
        "desiredReplicas: '30'",
    ),
    (
        "cron-day-and-month-swapped",
        "sale_rules",
        "infra/modules/app.bicep",
        "${int(substring(window.start, 8, 2))} ${int(substring(window.start, 5, 2))} *",
        "${int(substring(window.start, 5, 2))} ${int(substring(window.start, 8, 2))} *",
    ),
    (
        "cron-minute-offset-moved",
        "sale_rules",
        "infra/modules/app.bicep",
        "${int(substring(window.end, 14, 2))}",
        "${int(substring(window.end, 13, 2))}",
    ),
    (
        "sale-rules-not-patched",
        "sale_rules",
        "infra/modules/app.bicep",
        "var scaleRules = concat(baseRules, saleRules)",
        "var scaleRules = baseRules",
    ),
    (
        "calendar-not-passed-to-the-app",
        "sale_rules",
        "infra/main.bicep",
        "    saleWindows: saleWindows\n",
        "    saleWindows: []\n",
    ),
    (
        "calendar-as-a-json-string",  # azd would paste its quotes into the parameters file unescaped
        "sale_rules",
        "infra/main.bicep",
        "param saleCalendar array = []",
        "param saleCalendar string = ''",
    ),
    (
        "hook-checks-another-variable",
        "sale_rules",
        "infra/hooks/sale_calendar.py",
        '"saleCalendar": "SCORING_SALE_CALENDAR"',
        '"saleCalendar": "SALE_CALENDAR"',
    ),
    ("cron-type-misspelt", "schema", "infra/modules/app.bicep", "type: 'cron'", "type: 'crons'"),
    (
        "cron-metadata-misspelt",
        "schema",
        "infra/modules/app.bicep",
        "desiredReplicas: string(window.replicas)",
        "desiredReplica: string(window.replicas)",
    ),
    (
        "app-ignores-the-feast-url",
        "redis_stores",
        "infra/modules/app.bicep",
        "{ name: 'FEAST_REDIS_URL', value: feastRedisUrl }",
        "{ name: 'FEAST_REDIS_URL', value: '' }",
    ),
]

COPIED = (
    "infra",
    "host.json",
    "function_app.py",
    "azure.yaml",
    "Dockerfile",
    "shared/adapters/queue/handler.py",
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


def test_a_floating_base_image_is_caught(tmp_path: Path) -> None:
    """The Dockerfile is not in MUTATIONS' pristine tree as pinned (the pin is the issue 22 work's
    to make), so this mutation starts from a pinned copy: pinned passes, the tag alone fails."""
    from checks.platform import check_base_image_pinned

    digest = "sha256:" + "0" * 64
    source = (REPO / "Dockerfile").read_text()
    pinned = re.sub(r"^(FROM\s+\S+?)(@sha256:[0-9a-f]{64})?$", rf"\1@{digest}", source, count=1, flags=re.M)
    (tmp_path / "Dockerfile").write_text(pinned)
    assert check_base_image_pinned(tmp_path) == [], "the check must pass on a pinned copy"
    (tmp_path / "Dockerfile").write_text(pinned.replace(f"@{digest}", ""))
    SCORE["total"] += 1
    findings = check_base_image_pinned(tmp_path)
    SCORE["caught"] += bool(findings)
    assert findings, "the base-image check missed a FROM by tag"
