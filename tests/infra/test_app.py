"""The Container App: scaling, KEDA rules, probes, app settings, identity-only connections."""

from __future__ import annotations

import json
import re
from typing import Any

from checks.bicep_lang import BicepFile
from checks.contract import rule_list
from conftest import INFRA, Module, app_setting_names, local_setting_names

TRIGGER_QUEUE = "payments"
IDENTITY_CONNECTIONS = ("AzureWebJobsStorage", "ServiceBusConnection", "ModelStorage")


def _scale(container_app: dict[str, Any]) -> dict[str, Any]:
    return container_app["properties"]["template"]["scale"]


def _patched_scale(app: Module) -> dict[str, Any]:
    """The scale block the post-provision hook PATCHes onto the app (app.bicep output)."""
    return app.tree["outputs"]["scale"]["value"]


def _rules(app: Module, container_app: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules the hook PATCHes: the base rules, then one cron rule standing for each sale window."""
    rules = rule_list(app.tree, _patched_scale(app)["rules"])
    assert rules, "the app has no scale rules"
    return rules


def test_is_a_functions_container_app_with_our_scale_rules(app: Module, container_app: dict[str, Any]) -> None:
    assert container_app["kind"] == "functionapp"
    # Learn documents the override only as a PATCH on an existing app: the create carries
    # neither the override nor rules; the hook PATCHes the `scale` output in.
    assert "allowScalingRuleOverride" not in _scale(container_app)
    assert "rules" not in _scale(container_app)
    patched = _patched_scale(app)
    assert patched["allowScalingRuleOverride"] is True
    assert patched["rules"] == "scaleRules"
    assert patched["minReplicas"] == _scale(container_app)["minReplicas"]
    assert patched["maxReplicas"] == _scale(container_app)["maxReplicas"]


def test_override_hook_and_azd_use_the_app_api_version() -> None:
    from checks.contract import check_override_api_version

    assert check_override_api_version(INFRA.parent) == []
    yaml = (INFRA.parent / "azure.yaml").read_text()
    hook = (INFRA / "hooks" / "keda-scale-rules.sh").read_text()
    assert "--method patch" in hook and "allowScalingRuleOverride" in hook
    hooks = re.findall(r"^  (post\w+):\n(?:.*\n)*?\s+run: (\S+)", yaml, re.M)
    runs = dict(hooks)
    assert runs.get("postprovision") == "./infra/hooks/keda-scale-rules.sh", runs
    assert "keda-scale-rules.sh" in (INFRA.parent / runs["postdeploy"]).read_text()


def test_min_replicas_is_at_least_two_by_construction(
    modules: dict[str, Module], container_app: dict[str, Any]
) -> None:
    """Whatever the profile or the override: main.bicep passes `max(2, ...)`, app.bicep refuses less."""
    app, main = modules["app"], modules["main"]
    ref = _scale(container_app)["minReplicas"]
    assert ref in app.params, "minReplicas must come from the minReplicas parameter"
    assert app.param_min(ref) is not None and app.param_min(ref) >= 2
    assert app.resolve(ref) >= 2
    passed = main.tree["modules"]["app"]["config"]["params"]["minReplicas"]
    assert passed == "scaleMinReplicas", "main.bicep must pass the resolved floor, scaleMinReplicas"
    floor = "".join(t.text for t in BicepFile.load(INFRA / "main.bicep").variables["scaleMinReplicas"])
    assert re.fullmatch(r"max\(2,.+\)", floor), f"scaleMinReplicas must be max(2, ...): {floor}"
    for name, sizing in main.var("profiles").items():
        assert sizing["minReplicas"] >= 2, f"profile {name} asks for fewer than 2 replicas"
        assert sizing["maxReplicas"] >= sizing["minReplicas"], name
    azd = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
    default = re.fullmatch(r"\$\{\w+=(\d+)\}", azd["minReplicas"]["value"])
    assert default and (int(default.group(1)) == 0 or int(default.group(1)) >= 2), azd["minReplicas"]


def test_max_replicas_is_a_parameter(modules: dict[str, Module], container_app: dict[str, Any]) -> None:
    app = modules["app"]
    ref = _scale(container_app)["maxReplicas"]
    assert ref in app.params
    assert app.resolve(ref) >= app.resolve(_scale(container_app)["minReplicas"])
    assert "maxReplicas" in modules["main"].params


def test_service_bus_rule_targets_the_trigger_queue_with_managed_identity(
    app: Module, container_app: dict[str, Any]
) -> None:
    sb_rules = [
        r
        for r in _rules(app, container_app)
        if r.get("custom", {}).get("type") == "azure-servicebus"
        and app.resolve(r["custom"]["metadata"]["queueName"]) == TRIGGER_QUEUE
    ]
    assert len(sb_rules) == 1, "expected exactly one azure-servicebus KEDA rule on the payments queue"
    custom = sb_rules[0]["custom"]
    assert app.resolve(custom["metadata"]["queueName"]) == TRIGGER_QUEUE
    assert custom["metadata"].get("namespace"), "the scaler needs the namespace name with identity auth"
    count = custom["metadata"]["messageCount"]  # string(queueMessagesPerReplica)
    assert count["function"]["type"] == "string", count
    assert app.resolve(count["function"]["parameters"]["value_to_convert"]) >= 1
    assert "auth" not in custom, "the scaler must not use secret-based auth"
    identity = custom.get("identity")
    assert identity in app.params, "the scale rule must name a user-assigned identity (resource id param)"
    identities = {key.strip("'") for key in container_app["identity"]["userAssignedIdentities"]}
    assert f"${{{identity}}}" in identities, "the scaler identity must be assigned to the app"


def test_each_sale_window_is_a_cron_rule_in_the_patched_scale(app: Module, container_app: dict[str, Any]) -> None:
    from checks.sale_rules import SAMPLE_WINDOWS, bicep_sale_rules

    cron = [r for r in _rules(app, container_app) if r.get("custom", {}).get("type") == "cron"]
    assert len(cron) == 1, "expected one cron rule (the loop body over saleWindows)"
    (first,) = bicep_sale_rules(app.tree, [dict(SAMPLE_WINDOWS[0])])
    assert first == {
        "name": "sale-window-0",
        "custom": {
            "type": "cron",
            "metadata": {
                "timezone": "Europe/London",
                "start": "45 8 11 12 *",
                "end": "0 11 11 12 *",
                "desiredReplicas": "30",
            },
        },
    }


def test_http_concurrency_rule(app: Module, container_app: dict[str, Any]) -> None:
    http = [r for r in _rules(app, container_app) if "http" in r]
    assert len(http) == 1
    assert "concurrentRequests" in http[0]["http"]["metadata"]


def test_platform_identity_is_not_available_to_containers(container_app: dict[str, Any], app: Module) -> None:
    settings = {s["identity"]: s["lifecycle"] for s in container_app["properties"]["configuration"]["identitySettings"]}
    assert settings["platformIdentityId"] == "None"
    assert settings["appIdentityId"] == "Main"
    registries = container_app["properties"]["configuration"]["registries"]
    assert all(r["identity"] == "platformIdentityId" and "passwordSecretRef" not in r for r in registries)


def test_probes_hit_the_health_routes(app: Module, container_app: dict[str, Any]) -> None:
    probes = {p["type"]: p for p in app.var("probes")}
    # NOTE: liveness asks the host itself, outside its HTTP throttle (docs/platform.md P8, P9)
    assert probes["Liveness"]["httpGet"]["path"] == "/admin/host/ping"
    assert probes["Readiness"]["httpGet"]["path"] == "/api/health/ready"
    assert probes["Startup"]["httpGet"]["path"].startswith("/api/health/")
    for probe in probes.values():
        assert app.resolve(probe["httpGet"]["port"]) == 80, "the Functions image serves on port 80"
    container = container_app["properties"]["template"]["containers"][0]
    assert container["probes"]["operator"]["operands"]["false_value"] == "probes", (
        "the real image must run with the probes"
    )
    assert app.resolve(container_app["properties"]["configuration"]["ingress"]["targetPort"]) == 80


def test_container_uses_all_setting_lists(app: Module, container_app: dict[str, Any]) -> None:
    container = container_app["properties"]["template"]["containers"][0]
    assert container["env"] == "env"
    args = app.var("env")["function"]["parameters"]
    assert args["arg_1"] == "hostSettings" and args["arg_2"] == "serviceSettings"
    assert args["arg_3"]["operator"]["operands"]["false_value"] == "openAiSettings"


def test_every_setting_the_code_reads_is_set(app_env: dict[str, Any]) -> None:
    missing = [name for name in app_setting_names() if name not in app_env]
    assert not missing, f"settings the code reads but infra/modules/app.bicep does not set: {missing}"


def test_every_service_setting_is_one_the_code_reads(app: Module) -> None:
    """A setting nothing reads promises what the app no longer does (FAST_LANE_PORT outlived its lane)."""
    unread = [s["name"] for s in app.var("serviceSettings") if s["name"] not in app_setting_names()]
    assert not unread, f"infra/modules/app.bicep sets settings the code does not read: {unread}"


def test_local_only_settings_are_not_set(app_env: dict[str, Any]) -> None:
    leaked = [name for name in local_setting_names() if name in app_env]
    assert not leaked, f"local-only settings set on the Container App: {leaked}"


def test_connections_are_identity_based(app_env: dict[str, Any]) -> None:
    assert app_env["FUNCTIONS_WORKER_RUNTIME"] == "python"
    assert app_env["AZURE_CLIENT_ID"] == "appClientId"
    for prefix in IDENTITY_CONNECTIONS:
        assert app_env[f"{prefix}__credential"] == "managedidentity", prefix
        assert app_env[f"{prefix}__clientId"] == "appClientId", prefix
        assert prefix not in app_env, f"{prefix} must not be a connection string"
    assert "AzureWebJobsStorage__accountName" in app_env
    assert "ServiceBusConnection__fullyQualifiedNamespace" in app_env
    assert "ModelStorage__blobServiceUri" in app_env


def test_redis_url_is_tls_without_password(app_env: dict[str, Any]) -> None:
    url = app_env["REDIS_URL"]
    assert isinstance(url, str) and url.startswith("rediss://"), url
    assert "@" not in url and "password" not in url.lower()
    assert app_env["REDIS_USE_ENTRA"] == "true"


def test_telemetry_connection_string_comes_from_the_resource(app_env: dict[str, Any]) -> None:
    value = app_env["APPLICATIONINSIGHTS_CONNECTION_STRING"]
    assert isinstance(value, dict), "APPLICATIONINSIGHTS_CONNECTION_STRING must reference the resource, not a literal"
    assert "ConnectionString" in json.dumps(value)


def test_openai_settings_are_identity_only(app_env: dict[str, Any]) -> None:
    assert {"AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_DEPLOYMENT"} <= set(app_env)
    assert not [n for n in app_env if "OPENAI" in n and "KEY" in n]


def test_the_grpc_port_is_mapped_inside_the_environment_only(app: Module) -> None:
    from checks.grpc_ingress import check_grpc_ingress

    assert check_grpc_ingress(INFRA.parent) == []
    assert app.resolve("grpcPort") == 8001


def test_one_worker_process_per_replica(app_env: dict[str, Any]) -> None:
    """The in-process caches and batchers, and the gRPC port, assume one worker process."""
    assert app_env["FUNCTIONS_WORKER_PROCESS_COUNT"] == "1"
