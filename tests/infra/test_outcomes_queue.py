"""The `risk-outcomes` queue (issue 57): declared as its trigger reads it, scaled by its own KEDA rule,
received by the runtime identity alone (least privilege), read by the scaler, and alerted on."""

from __future__ import annotations

from typing import Any

from checks.contract import rule_list
from conftest import Module, trigger


def assignments(sb: Module, scope: str) -> list[tuple[str, str]]:
    """(principal, role) of every role assignment scoped to the resource `scope`."""
    found = []
    for assignment in sb.resources("Microsoft.Authorization/roleAssignments"):
        if assignment["scope"] == scope:
            role = assignment["properties"]["roleDefinitionId"]["function"]["parameters"]["resource_name_1"]
            found.append((assignment["properties"]["principalId"], role))
    return sorted(found)


def outcomes_rules(app: Module) -> list[dict[str, Any]]:
    rules = rule_list(app.tree, app.tree["outputs"]["scale"]["value"]["rules"])
    return [r for r in rules if (r.get("custom") or {}).get("metadata", {}).get("queueName") == "outcomesQueueName"]


def test_the_outcomes_queue_is_the_one_its_trigger_reads_through_the_same_connection(
    modules: dict[str, Module],
) -> None:
    _, outcomes = trigger("service_bus_queue_trigger", "risk_outcomes")
    _, payments = trigger("service_bus_queue_trigger", "payments")
    for module in ("servicebus", "app", "alerts"):
        assert modules[module].params["outcomesQueueName"]["default"] == outcomes["queue_name"], module
    assert outcomes["connection"] == payments["connection"]
    assert "MANY" in str(outcomes["cardinality"])  # a batch trigger: the payments lock rules apply


def test_the_outcomes_queue_keeps_the_input_queues_lock_and_delivery_rules(modules: dict[str, Module]) -> None:
    sb = modules["servicebus"]
    queues = {q["name"]: q["properties"] for q in sb.resources("Microsoft.ServiceBus/namespaces/queues")}
    outcomes, payments = queues["outcomesQueueName"], queues["inputQueueName"]
    for rule in ("lockDuration", "maxDeliveryCount", "requiresDuplicateDetection", "deadLetteringOnMessageExpiration"):
        assert outcomes[rule] == payments[rule], rule


def test_the_runtime_may_only_receive_from_it_and_the_scaler_only_read_it(modules: dict[str, Module]) -> None:
    assert assignments(modules["servicebus"], "outcomesQueue") == [
        ("appPrincipalId", "receiverRoleId"),
        ("scalerPrincipalId", "ownerRoleId"),
    ]


def test_a_backlog_of_outcomes_scales_the_app_through_the_platform_identity(app: Module) -> None:
    (rule,) = outcomes_rules(app)
    assert rule["custom"]["type"] == "azure-servicebus"
    assert rule["custom"]["identity"] == "platformIdentityId"
    assert rule["custom"]["metadata"]["namespace"] == "serviceBusName"


def test_the_backlog_and_size_alerts_watch_the_outcomes_queue(modules: dict[str, Module]) -> None:
    (dimension,) = modules["alerts"].var("queueDimension")
    assert "outcomesQueueName" in dimension["values"] and "inputQueueName" in dimension["values"]


def test_the_checks_catch_a_rule_or_role_that_is_lost(modules: dict[str, Module], app: Module) -> None:
    """Mutations: the KEDA rule renamed to another queue, the receiver role widened to the namespace."""
    rules = app.tree["variables"]["baseRules"]["value"]
    for rule in rules:
        if (rule.get("custom") or {}).get("metadata", {}).get("queueName") == "outcomesQueueName":
            rule["custom"]["metadata"]["queueName"] = "inputQueueName"
    try:
        assert outcomes_rules(app) == []
    finally:
        for rule in rules:
            if rule.get("name") == "outcomes-queue-depth":
                rule["custom"]["metadata"]["queueName"] = "outcomesQueueName"
    sb = modules["servicebus"]
    receiver = sb.tree["resources"]["outcomesReceiver"]["config"]
    receiver["scope"] = "namespace"
    try:
        assert ("appPrincipalId", "receiverRoleId") not in assignments(sb, "outcomesQueue")
    finally:
        receiver["scope"] = "outcomesQueue"
