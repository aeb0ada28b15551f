"""The infrastructure matches the triggers function_app.py declares (read with `ast`)."""

from __future__ import annotations

import re
from typing import Any

from conftest import INFRA, Module, function_app_bindings, trigger


def test_scaler_and_queues_follow_the_service_bus_trigger(
    modules: dict[str, Module], container_app: dict[str, Any]
) -> None:
    _, sb_trigger = trigger("service_bus_queue_trigger", "payments")
    app, sb = modules["app"], modules["servicebus"]
    assert app.params["inputQueueName"]["default"] == sb_trigger["queue_name"]
    assert sb.params["inputQueueName"]["default"] == sb_trigger["queue_name"]
    assert modules["main"].var("inputQueueName") == sb_trigger["queue_name"]


def test_output_queues_exist_for_every_output_binding(modules: dict[str, Module]) -> None:
    # A function may carry several output decorators, so read them from the source text; results
    # and rejections go through the SDK publisher, whose queues are named in shared/adapters/queue/
    # (`*_QUEUE = "..."`: handler.py's results, messages.py's rejections; outcomes.py's is an input).
    source = (INFRA.parent / "function_app.py").read_text()
    outputs = set(re.findall(r'service_bus_queue_output\([^)]*queue_name="([^"]+)"', source))
    for name in ("handler.py", "messages.py"):
        module = (INFRA.parent / "shared" / "adapters" / "queue" / name).read_text()
        outputs |= set(re.findall(r'^[A-Z_]+_QUEUE = "([^"]+)"', module, re.M))
    assert outputs >= {"risk-completed", "risk-rejected"}, outputs
    assert outputs <= set(modules["servicebus"].params["outputQueueNames"]["default"])


def test_connection_prefixes_have_identity_settings(app_env: dict[str, Any]) -> None:
    for decorator, suffix in (
        ("service_bus_queue_trigger", "__fullyQualifiedNamespace"),
        ("blob_trigger", "__blobServiceUri"),
    ):
        _, kwargs = trigger(decorator, "payments" if decorator == "service_bus_queue_trigger" else None)
        assert f"{kwargs['connection']}{suffix}" in app_env, f"{decorator}: {kwargs['connection']}{suffix} not set"
        assert app_env[f"{kwargs['connection']}__credential"] == "managedidentity"


def test_blob_trigger_container_and_event_grid_hook(modules: dict[str, Module], app_env: dict[str, Any]) -> None:
    name, blob = trigger("blob_trigger")
    container = blob["path"].split("/", 1)[0]
    if container.startswith("%") and container.endswith("%"):
        # an app-setting expression: the app must set it, from the same parameter as the container
        assert container.strip("%") in app_env, f"{container} is not set on the app"
        container = modules["storage"].params["modelsContainerName"]["default"]
        assert app_env["MODELS_CONTAINER"] in ("modelsContainerName", container)
    assert modules["storage"].params["modelsContainerName"]["default"] == container
    assert "EVENT_GRID" in str(blob.get("source")), "the infra subscribes the blob trigger through Event Grid"
    hook = (INFRA / "hooks" / "eventgrid-subscription.sh").read_text()
    default = re.search(r'BLOB_TRIGGER_FUNCTION="\$\{BLOB_TRIGGER_FUNCTION:-(\w+)\}"', hook)
    assert default and default.group(1) == name, f"hook default function name must be {name!r}"
    assert blob["path"].endswith("/model.onnx") and '--subject-ends-with "/model.onnx"' in hook


def test_probe_routes_are_served_anonymously() -> None:
    routes = [decos["route"] for decos in function_app_bindings().values() if "route" in decos]
    health = [r for r in routes if str(r.get("route", "")).startswith("api/health")]
    assert health, "function_app.py has no health route for the probes"
    assert all("ANONYMOUS" in str(r.get("auth_level")) for r in health), "probes must not need a function key"
