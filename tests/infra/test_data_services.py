"""Service Bus queues, Redis, Storage, registry and alerts: the settings the design relies on."""

from __future__ import annotations

import re
from typing import Any

from conftest import Module

OUTPUT_QUEUES = {"risk-completed", "risk-rejected"}
EXPIRING = {"risk-rejected", "risk-rejected-dead"}  # deleted when they expire (tests/infra/test_rejection_retention.py)
ISO_DURATION = re.compile(r"^P(T\d+[SMH]|\d+D)$")


def _queue_properties(sb: Module) -> list[tuple[str, dict[str, Any]]]:
    queues = []
    for res in sb.tree["resources"].values():
        if res["type"] != "Microsoft.ServiceBus/namespaces/queues":
            continue
        config = res["config"]
        if "loop_type" in config:
            detail = config["loop_type"]["detail"]
            names = sb.resolve(detail["array_name"])
            queues += [
                (name, _for_item(sb, config["config"]["properties"], detail["item_name"], name)) for name in names
            ]
        else:
            queues.append((sb.resolve(config["name"]), config["properties"]))
    return queues


def _for_item(sb: Module, props: dict[str, Any], item: str, name: str) -> dict[str, Any]:
    """A loop's properties for one item: `(item == x) ? a : b` and `item != x` evaluated."""

    def value(v: Any) -> Any:
        operator = v.get("operator") if isinstance(v, dict) else None
        if operator is None:
            return v
        operands = operator["operands"]
        if operator["type"] in ("equals", "not_equals") and operands["operand_1"] == item:
            same = sb.resolve(operands["operand_2"]) == name
            return same if operator["type"] == "equals" else not same
        if operator["type"] == "conditional":
            return value(operands["true_value"] if value(operands["condition"]) else operands["false_value"])
        return v

    return {k: value(v) for k, v in props.items()}


def test_queues_exist(modules: dict[str, Module]) -> None:
    names = {name for name, _ in _queue_properties(modules["servicebus"])}
    assert names == {"payments", "risk-outcomes"} | OUTPUT_QUEUES | EXPIRING


def test_queues_deduplicate_dead_letter_and_bound_deliveries(modules: dict[str, Module]) -> None:
    sb = modules["servicebus"]
    for name, props in _queue_properties(sb):
        assert props["requiresDuplicateDetection"] is True, name
        assert ISO_DURATION.match(sb.resolve(props["duplicateDetectionHistoryTimeWindow"])), name
        assert props["deadLetteringOnMessageExpiration"] is (name not in EXPIRING), name
        assert 1 <= sb.resolve(props["maxDeliveryCount"]) <= 10, name
        assert ISO_DURATION.match(sb.resolve(props["lockDuration"])), name
        # Unpartitioned by decision (docs/capacity.md: partition exhaustion).
        assert props["enablePartitioning"] is False, name
        assert props["requiresSession"] is False, name


def test_payments_lock_outlasts_processing(modules: dict[str, Module]) -> None:
    sb = modules["servicebus"]
    props = dict(_queue_properties(sb))["payments"]
    lock = sb.resolve(props["lockDuration"])
    seconds = int(lock[2:-1]) * {"S": 1, "M": 60, "H": 3600}[lock[-1]]
    # p99 budget is 50 ms; the Azure OpenAI review is bounded by a few seconds. The lock
    # must cover that with margin, yet return a crashed replica's messages quickly.
    assert 10 <= seconds <= 120, lock


def test_service_bus_has_local_auth_off(modules: dict[str, Module]) -> None:
    ns = modules["servicebus"].resource("Microsoft.ServiceBus/namespaces")
    assert ns["properties"]["disableLocalAuth"] is True
    assert ns["properties"]["minimumTlsVersion"] == "1.2"


def test_service_bus_roles_are_scoped_to_queues(modules: dict[str, Module]) -> None:
    roles = modules["servicebus"].resources("Microsoft.Authorization/roleAssignments")
    assert roles and all(r["scope"] != "namespace" for r in roles), "no namespace-wide data roles"


def test_redis_is_tls_volatile_lru_and_entra_only(modules: dict[str, Module]) -> None:
    redis = modules["redis"]
    cluster = redis.resource("Microsoft.Cache/redisEnterprise")
    db = redis.resource("Microsoft.Cache/redisEnterprise/databases")["properties"]
    assert cluster["properties"]["minimumTlsVersion"] == "1.2"
    assert db["clientProtocol"] == "Encrypted"
    # volatile-lru evicts only keys with a TTL: predictions (CACHE_L2_TTL_S > 0), never features
    # (the module's default; main.bicep's Feast online store passes NoEviction: checks.redis_stores)
    assert redis.resolve(db["evictionPolicy"]) == "VolatileLRU"
    assert db["accessKeysAuthentication"] == "Disabled"
    policy = redis.resource("Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments")
    assert policy["properties"]["user"]["objectId"] == "appPrincipalId"


def test_predictions_carry_a_ttl_under_volatile_lru(modules: dict[str, Module], app_env: dict[str, Any]) -> None:
    # Under a volatile-* policy a key without TTL is never evicted: predictions must carry one.
    db = modules["redis"].resource("Microsoft.Cache/redisEnterprise/databases")["properties"]
    if str(modules["redis"].resolve(db["evictionPolicy"])).startswith("Volatile"):
        assert float(app_env["CACHE_L2_TTL_S"]) > 0, app_env["CACHE_L2_TTL_S"]


def test_storage_is_identity_only(modules: dict[str, Module]) -> None:
    storage = modules["storage"]
    props = storage.resource("Microsoft.Storage/storageAccounts")["properties"]
    assert props["allowSharedKeyAccess"] is False
    assert props["allowBlobPublicAccess"] is False
    assert props["minimumTlsVersion"] == "TLS1_2"
    containers = storage.resources("Microsoft.Storage/storageAccounts/blobServices/containers")
    # the host's two containers are declared so the runtime's Blob Data Owner is scoped to them (checks/model_roles.py)
    host = ["azure-webjobs-hosts", "azure-webjobs-secrets"]
    assert sorted(storage.resolve(c["name"]) for c in containers) == [*host, "models", "predictions"]
    assert all(c["properties"]["publicAccess"] == "None" for c in containers)
    topic = storage.resource("Microsoft.EventGrid/systemTopics")
    assert topic["properties"]["topicType"] == "Microsoft.Storage.StorageAccounts"


def test_registry_has_no_admin_user(modules: dict[str, Module]) -> None:
    props = modules["registry"].resource("Microsoft.ContainerRegistry/registries")["properties"]
    assert props["adminUserEnabled"] is False
    assert props["anonymousPullEnabled"] is False


def test_openai_is_keyless_and_optional(modules: dict[str, Module]) -> None:
    props = modules["openai"].resource("Microsoft.CognitiveServices/accounts")["properties"]
    assert props["disableLocalAuth"] is True
    assert modules["main"].tree["modules"]["openAi"]["config"]["condition"] == "deployOpenAi"


def test_gpu_profile_is_optional(modules: dict[str, Module]) -> None:
    env = modules["environment"]
    assert env.params["enableGpu"]["default"] is False
    allowed = next(d["argument"] for d in env.params["gpuProfileType"]["decorators"] if d["type"] == "allowed")
    assert all(t.startswith("Consumption-GPU-") for t in allowed)
    # Which profiles exist in each state, and the two-step moves: checks.platform.check_profile_moves.
    types = {
        name: env.var(name)["workloadProfileType"] for name in ("consumptionProfile", "dedicatedProfile", "gpuProfile")
    }
    assert types["gpuProfile"] == "gpuProfileType" and types["consumptionProfile"] == "Consumption"
    assert env.params["keepCpuPool"]["default"] is True and env.params["keepGpuProfile"]["default"] is False


def test_alerts_cover_the_named_signals(modules: dict[str, Module]) -> None:
    alerts = modules["alerts"]
    names = set(alerts.tree["resources"])
    assert {"p99Latency", "errorRate", "deadLetters", "queueDepth", "queueAge", "queueSize", "replicasAtMax"} <= names
    metrics = {
        c["metricName"]
        for r in alerts.resources("Microsoft.Insights/metricAlerts")
        for c in r["properties"]["criteria"]["allOf"]
    }
    assert {"ActiveMessages", "Size", "Replicas"} <= metrics
    # new dead letters: a log query over the namespace metrics, not a metric alert on the count
    query = alerts.var("newDeadLettersQuery")
    assert "DeadletteredMessages" in query and "prev(" in query
