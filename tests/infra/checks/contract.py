"""Checks across files: roles, metrics, host.json against the alerts and the queue, and
infra/ against function_app.py and the app settings. Each takes the repository root (or a
scratch copy of it) and returns findings; an empty list means consistent.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from .bicep_lang import load_all, resource_type_of
from .parsing import parse
from .tables import BUILT_IN_ROLES, EXPECTED_GRANTS, METRICS

GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
INFORMATION = 2
LOG_LEVELS = {"trace": 0, "debug": 1, "information": 2, "warning": 3, "error": 4, "critical": 5, "none": 6}
SERVICE_BUS_MAX_LOCK_S = 300  # P3: "The maximum value for LockDuration is 5 minutes"
# NOTE: after `handle` returns, the host still answers the invocation over gRPC and completes
# every message of the batch (one broker round trip each, concurrently: P4). A generous
# allowance; docs/deploy.md's checklist measures it on the deployed app.
HOST_SETTLE_S = 30
HOST_TRACE_SAMPLERS = frozenset({"microsoft.rate_limited", "microsoft.fixed_percentage"})  # P17
HOST_ANONYMOUS_PATHS = frozenset({"/admin/host/ping"})  # P9: HostController.Ping has no [Authorize]


def _body(resource: dict[str, Any]) -> dict[str, Any]:
    config = resource["config"]
    while isinstance(config.get("config"), dict) and ("loop_type" in config or "condition" in config):
        config = config["config"]
    return config


def _var_text(tree: dict[str, Any], value: Any, depth: int = 0) -> Any:
    """Resolve an identifier to its var value and `${var}` inside strings (string vars only)."""
    variables = tree.get("variables", {})
    if depth < 5 and isinstance(value, str):
        if value in variables:
            return _var_text(tree, variables[value]["value"], depth + 1)
        return re.sub(
            r"\$\{(\w+)\}",
            lambda m: (
                str(_var_text(tree, variables[m.group(1)]["value"], depth + 1))
                if m.group(1) in variables and isinstance(variables[m.group(1)]["value"], str)
                else m.group(0)
            ),
            value,
        )
    return value


def rule_list(tree: dict[str, Any], value: Any, depth: int = 0) -> list[Any]:
    """A scale-rule list as ARM builds it: a var resolved, `concat(a, b)` joined, and a
    `[for ...]` loop given as its body (one rule standing for each item)."""
    value = _var_text(tree, value) if isinstance(value, str) else value
    if depth > 5:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and value.get("function", {}).get("type") == "concat":
        return [r for arg in value["function"]["parameters"].values() for r in rule_list(tree, arg, depth + 1)]
    if isinstance(value, dict) and "loop_type" in value:
        return [value["config"]]
    return []


def _param_default(tree: dict[str, Any], value: Any) -> Any:
    params = tree.get("parameters", {})
    if isinstance(value, str) and value in params:
        return params[value].get("default")
    return _var_text(tree, value)


# --- roles ------------------------------------------------------------------------------


def check_roles(root: Path) -> list[str]:
    """Every roleDefinitionId is a reviewed built-in role (P26); each identity gets exactly its grants."""
    infra = root / "infra"
    files = load_all(infra)
    main = files[(infra / "main.bicep").resolve()]
    findings: list[str] = []
    grants: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(infra.rglob("*.bicep")):
        tree = parse(path)
        resources = tree.get("resources", {})
        for name, res in resources.items():
            if res["type"].lower() != "microsoft.authorization/roleassignments":
                continue
            props = _body(res)["properties"]
            ref = props["roleDefinitionId"]
            fn = ref.get("function", {}) if isinstance(ref, dict) else {}
            guid = _var_text(tree, fn.get("parameters", {}).get("resource_name_1"))
            if fn.get("type") != "subscription_resource_id" or not isinstance(guid, str) or not GUID.match(guid):
                findings.append(
                    f"{path.name}: {name}: roleDefinitionId is not subscriptionResourceId(roleDefinitions, '<guid>')"
                )
                continue
            if guid not in BUILT_IN_ROLES:
                findings.append(f"{path.name}: {name}: role {guid} is not in tables.BUILT_IN_ROLES")
                continue
            role = BUILT_IN_ROLES[guid][0]
            scope = _body(res).get("scope")
            if isinstance(scope, dict):  # outputQueues[i]
                scope = scope.get("operator", {}).get("operands", {}).get("operand_1")
            scope_type = resources.get(scope, {}).get("type", f"<{scope}>")
            identity = _identity(main, path, props["principalId"])
            grants.setdefault(identity, set()).add((role, scope_type))
    for identity in sorted(set(grants) | set(EXPECTED_GRANTS)):
        got, want = grants.get(identity, set()), EXPECTED_GRANTS.get(identity, set())
        for extra in sorted(got - want):
            findings.append(f"identity {identity}: granted {extra[0]} on {extra[1]}, which the design does not need")
        for missing in sorted(want - got):
            findings.append(f"identity {identity}: lacks {missing[0]} on {missing[1]}")
    return findings


def _identity(main: Any, module_path: Path, principal_param: Any) -> str:
    """Which identity (app/platform) main.bicep passes into a module's principal parameter."""
    for _, (rel, args) in main.modules.items():
        if (main.path.parent / rel).resolve() == module_path.resolve() and principal_param in args:
            text = "".join(t.text for t in args[principal_param])
            m = re.fullmatch(r"identity\.outputs\.(\w+?)PrincipalId", text)
            return m.group(1) if m else text
    return f"<{principal_param}>"


# --- metrics ----------------------------------------------------------------------------


def check_metrics(root: Path) -> list[str]:
    """Metric alerts and AzureMetrics queries name metrics their resource type emits (P27)."""
    infra = root / "infra"
    files = load_all(infra)
    findings: list[str] = []
    known = frozenset().union(*METRICS.values())
    for path in sorted(infra.rglob("*.bicep")):
        tree = parse(path)
        for name, res in tree.get("resources", {}).items():
            body, kind = _body(res), res["type"].lower()
            if kind == "microsoft.insights/metricalerts":
                scope = body["properties"]["scopes"][0]
                scope_type = (resource_type_of(files, path, scope) or "").lower()
                allowed = METRICS.get(scope_type)
                for criterion in body["properties"]["criteria"]["allOf"]:
                    metric = _param_default(tree, criterion["metricName"])
                    if allowed is None:
                        findings.append(
                            f"{path.name}: {name}: no metrics table for scope {scope} ({scope_type or '?'})"
                        )
                    elif metric not in allowed:
                        findings.append(f"{path.name}: {name}: {scope_type} has no metric {metric!r}")
            if kind == "microsoft.insights/scheduledqueryrules":
                for criterion in body["properties"]["criteria"]["allOf"]:
                    query = str(_var_text(tree, criterion["query"]))
                    for metric in re.findall(r"MetricName\s*==\s*\\?'(\w+)", query):
                        if metric not in known:
                            findings.append(f"{path.name}: {name}: query names unknown metric {metric!r}")
    return findings


def _catalogue(root: Path) -> dict[str, Any]:
    """shared/telemetry/catalogue.py of `root` (standard library only), as {name: spec}."""
    import importlib.util
    import sys

    path = root / "shared" / "telemetry" / "catalogue.py"
    spec = importlib.util.spec_from_file_location("_telemetry_catalogue", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NOTE: dataclasses resolve annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return {s.name: s for s in module.CATALOGUE}


def check_app_metrics(root: Path) -> list[str]:
    """Every customMetrics name a log alert reads is one the app emits (the catalogue), and a
    metric the app records in seconds is scaled to the alert's milliseconds (P28)."""
    catalogue = _catalogue(root)
    findings: list[str] = []
    for path in sorted((root / "infra").rglob("*.bicep")):
        tree = parse(path)
        params = {k: v.get("default") for k, v in tree.get("parameters", {}).items()}
        for name, res in tree.get("resources", {}).items():
            if res["type"].lower() != "microsoft.insights/scheduledqueryrules":
                continue
            for criterion in _body(res)["properties"]["criteria"]["allOf"]:
                query = str(_var_text(tree, criterion["query"]))
                query = re.sub(r"\$\{(\w+)\}", lambda m, p=params: str(p.get(m.group(1), m.group(0))), query)
                for metric in re.findall(r"customMetrics\s*\|\s*where\s+name\s*==\s*\\?'([^'\\]+)", query):
                    spec = catalogue.get(metric)
                    if spec is None:
                        findings.append(f"{path.name}: {name}: the app emits no metric {metric!r}")
                    elif spec.unit == "s" and "_ms" in query and "1000" not in query:
                        findings.append(f"{path.name}: {name}: {metric!r} is in seconds; the query compares ms")
    return findings


# --- host.json against the alerts and the queue ------------------------------------------


def _level(host: dict[str, Any], category: str) -> int:
    """Effective log level of a category: the longest matching prefix, else `default`."""
    levels = {k.lower(): v for k, v in host.get("logging", {}).get("logLevel", {}).items()}
    parts = category.lower().split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in levels:
            return LOG_LEVELS[levels[key].lower()]
    return LOG_LEVELS[levels.get("default", "Information").lower()]


def _requests_alerts(root: Path) -> list[tuple[str, str, str, str]]:
    """(file, rule, query, measure column) of every log alert that reads `requests`."""
    found = []
    for path in sorted((root / "infra").rglob("*.bicep")):
        tree = parse(path)
        for name, res in tree.get("resources", {}).items():
            if res["type"].lower() != "microsoft.insights/scheduledqueryrules":
                continue
            for criterion in _body(res)["properties"]["criteria"]["allOf"]:
                query = str(_var_text(tree, criterion["query"]))
                table = re.match(r"\s*(\w+)", query)
                if table and table.group(1) == "requests":
                    found.append((path.name, name, query, str(criterion.get("metricMeasureColumn", ""))))
    return found


def check_logging_feeds_alerts(root: Path) -> list[str]:
    """Every `requests` alert reads a table the host writes the way host.json's telemetry mode says.

    OpenTelemetry mode (P16, P17): `requests` are the host's own HTTP server spans, which no log
    level filters and `logging.applicationInsights` does not sample (that section is not read:
    present, it is a belief); the host's exporter samples them per OTEL_TRACES_SAMPLER, which
    the app must set (an unset sampler leaves the rate to the exporter's default), and a sampled
    table is only read through ratios and percentiles (`pct_*`, `p<N>_*` columns), never counts.
    Application Insights mode (P15): the Host.Results category writes `requests` at
    Information, and the SDK's adaptive sampling must exclude Request.
    """
    host = json.loads((root / "host.json").read_text())
    alerts = _requests_alerts(root)
    if not alerts:
        return []
    findings: list[str] = []
    mode = str(host.get("telemetryMode", "ApplicationInsights")).lower()
    insights = host.get("logging", {}).get("applicationInsights")
    if mode == "opentelemetry":
        if insights is not None:
            findings.append(
                "host.json: logging.applicationInsights is not read in OpenTelemetry mode (P16): "
                "it samples and filters nothing there"
            )
        env = app_env(root)
        sampler = env.get("OTEL_TRACES_SAMPLER")
        if sampler not in HOST_TRACE_SAMPLERS or "OTEL_TRACES_SAMPLER_ARG" not in env:
            findings.append(
                f"app.bicep: OTEL_TRACES_SAMPLER {sampler!r} (+ _ARG) must name one of {sorted(HOST_TRACE_SAMPLERS)}: "
                "the host samples `requests` by it (P17)"
            )
        for file, name, _, column in alerts:
            if not re.match(r"(pct|p\d+)_", column):
                findings.append(
                    f"{file}: {name} reads `requests` as {column!r}: a sampled table gives ratios and percentiles, not counts"
                )
        return findings
    sampling = (insights or {}).get("samplingSettings", {})
    excluded = {t.strip().lower() for t in str(sampling.get("excludedTypes", "")).split(";")}
    for file, name, _, _ in alerts:
        if _level(host, "Host.Results") > INFORMATION:
            findings.append(f"{file}: {name} reads `requests`, but host.json logs Host.Results above Information")
        if sampling.get("isEnabled", True) and "request" not in excluded:
            findings.append(f"{file}: {name} counts `requests`, which host.json samples")
    return findings


def _hms(value: str) -> int:
    h, m, s = (int(float(x)) for x in value.split(":"))
    return h * 3600 + m * 60 + s


def _iso(value: str) -> int:
    m = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?", value)
    assert m, value
    h, mi, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def _queue_lock_s(root: Path, queue: str) -> int | None:
    tree = parse(root / "infra" / "modules" / "servicebus.bicep")
    for res in tree["resources"].values():
        body = _body(res)
        if (
            res["type"].lower() == "microsoft.servicebus/namespaces/queues"
            and _param_default(tree, body["name"]) == queue
        ):
            return _iso(_param_default(tree, body["properties"]["lockDuration"]))
    return None


def _is_batch(trigger: dict[str, Any]) -> bool:
    return "MANY" in str(trigger.get("cardinality", "")).upper()


def check_lock_budget(root: Path, trigger_queue: str) -> list[str]:
    """A batch's messages stay locked until the host settles them, with no renewal in between.

    The host renews no lock of a batch invocation, and maxAutoLockRenewalDuration and
    maxConcurrentCalls do not apply to batch functions (P1, P2: in host.json they are beliefs).
    A message is locked from its receipt until the host completes it after the function returns
    (P4), so the app's batch budget (QUEUE_BATCH_BUDGET_MS) plus the host's settling
    (HOST_SETTLE_S) must fit in the queue's lock, which Service Bus caps at 5 minutes (P3);
    functionTimeout must exceed the budget (the app's own bound ends the batch first) and not
    outlast the lock (P7); a minMessageBatchSize wait holds received messages too (P6); and a
    prefetched message's lock runs while it waits in the buffer behind the batch ahead (P5).
    """
    host = json.loads((root / "host.json").read_text())
    service_bus = host.get("extensions", {}).get("serviceBus", {})
    findings: list[str] = []
    triggers = [kw for _, kw in _one(function_app_bindings(root), "service_bus_queue_trigger")]
    if triggers and all(_is_batch(t) for t in triggers):
        for inert in ("maxAutoLockRenewalDuration", "maxConcurrentCalls"):
            if inert in service_bus:
                findings.append(f"host.json: serviceBus.{inert} does not apply to batch functions (P1, P2): a belief")
    lock = _queue_lock_s(root, trigger_queue)
    if lock is None:
        return [*findings, f"servicebus.bicep: no queue {trigger_queue!r}"]
    if not 5 <= lock <= SERVICE_BUS_MAX_LOCK_S:
        findings.append(
            f"servicebus.bicep: {trigger_queue} lockDuration {lock}s outside 5..{SERVICE_BUS_MAX_LOCK_S}s (P3)"
        )
    budget_ms = _service_setting(root, "QUEUE_BATCH_BUDGET_MS")
    if budget_ms is None or not budget_ms.isdigit():
        return [*findings, "app.bicep: serviceSettings sets no QUEUE_BATCH_BUDGET_MS (an integer)"]
    budget = int(budget_ms) / 1000
    timeout = _hms(host["functionTimeout"])
    wait = _hms(service_bus.get("maxBatchWaitTime", "00:00:00")) if service_bus.get("minMessageBatchSize", 1) > 1 else 0
    if wait + budget + HOST_SETTLE_S > lock:
        findings.append(
            f"servicebus.bicep: {trigger_queue} lockDuration {lock}s < batch wait {wait}s + QUEUE_BATCH_BUDGET_MS "
            f"{budget:g}s + the host's settling {HOST_SETTLE_S}s: a slow batch loses its locks (P1, P4)"
        )
    if not budget < timeout <= lock:
        findings.append(
            f"host.json: functionTimeout {timeout}s must exceed QUEUE_BATCH_BUDGET_MS {budget:g}s and not outlast "
            f"the {lock}s lock (P7)"
        )
    prefetch, batch = service_bus.get("prefetchCount", 0), service_bus.get("maxMessageBatchSize", 1000)
    ahead = -(-prefetch // batch)  # batches a message at the back of the buffer waits for
    if prefetch and (ahead + 1) * budget + HOST_SETTLE_S >= lock:
        findings.append(
            f"host.json: prefetchCount {prefetch} holds {ahead} batch(es) of {batch} that may each take "
            f"{budget:g}s: prefetched locks would expire in the buffer (P5)"
        )
    return findings


def _service_setting(root: Path, name: str) -> str | None:
    """The value infra/modules/app.bicep gives an app setting (`{ name: 'X', value: 'v' }`)."""
    text = (root / "infra" / "modules" / "app.bicep").read_text()
    found = re.search(r"\{\s*name:\s*'" + re.escape(name) + r"'\s*,\s*value:\s*'([^']*)'\s*\}", text)
    return found.group(1) if found else None


def check_admission(root: Path) -> list[str]:
    """The app, not the host, decides what is shed; the host's queue stays short.

    The Functions host runs at most `maxConcurrentRequests` HTTP invocations per instance and
    answers 429 past `maxOutstandingRequests` (running + queued), for every non-admin request,
    the readiness probe included (P8). So it must run more at once than the app's MAX_INFLIGHT (the
    probes and the app's own fast 503s need invocations beyond the app's slots), and queue no
    more than one more round (a request, or a probe, waits at most that long in the host).
    """
    host = json.loads((root / "host.json").read_text()).get("extensions", {}).get("http", {})
    concurrent, outstanding = host.get("maxConcurrentRequests"), host.get("maxOutstandingRequests")
    if not isinstance(concurrent, int) or not isinstance(outstanding, int) or concurrent < 1:
        return ["host.json: extensions.http needs maxConcurrentRequests and maxOutstandingRequests (integers)"]
    value = _service_setting(root, "MAX_INFLIGHT")
    if value is None or not value.isdigit():
        return ["app.bicep: serviceSettings sets no MAX_INFLIGHT (an integer)"]
    findings = []
    if int(value) == 0 or concurrent <= int(value):
        findings.append(
            f"host.json: maxConcurrentRequests {concurrent} <= MAX_INFLIGHT {value}: the host, not the app, "
            "would decide what waits, and the probes would queue behind scoring work"
        )
    if outstanding > 2 * concurrent:
        findings.append(
            f"host.json: maxOutstandingRequests {outstanding} > 2 x maxConcurrentRequests {concurrent}: "
            "a request would queue in the host longer than a round of work takes"
        )
    if outstanding < concurrent:
        findings.append(f"host.json: maxOutstandingRequests {outstanding} < maxConcurrentRequests {concurrent}")
    return findings


# --- the KEDA override: one Microsoft.App API version for Bicep, azd and the hook --------


def check_override_api_version(root: Path) -> list[str]:
    """app.bicep, azure.yaml's service apiVersion (P12) and the PATCH hook (P11) use one API
    version, and that version's Scale model knows allowScalingRuleOverride (P24)."""
    import yaml

    from .arm_models import fields, models_module

    tree = parse(root / "infra" / "modules" / "app.bicep")
    versions = {r["api_version"] for r in tree["resources"].values() if r["type"] == "Microsoft.App/containerApps"}
    if len(versions) != 1:
        return [f"app.bicep: expected one containerApps API version, found {sorted(versions)}"]
    version = versions.pop()
    findings = []
    services = yaml.safe_load((root / "azure.yaml").read_text()).get("services", {})
    for name, service in services.items():
        if service.get("host") == "containerapp" and service.get("apiVersion") != version:
            findings.append(
                f"azure.yaml: service {name} apiVersion {service.get('apiVersion')!r} != app.bicep's {version}"
            )
    hook = (root / "infra" / "hooks" / "keda-scale-rules.sh").read_text()
    hook_version = re.search(r'^API_VERSION="([^"]+)"', hook, re.M)
    if not hook_version or hook_version.group(1) != version:
        findings.append(f"keda-scale-rules.sh: API_VERSION is not app.bicep's {version}")
    models = models_module("azure.mgmt.appcontainers", version)
    if models is None or "allowScalingRuleOverride" not in fields(models, "Scale"):
        findings.append(f"Microsoft.App {version} has no allowScalingRuleOverride")
    return findings


# --- function_app.py ----------------------------------------------------------------------


def sdk_output_queues(root: Path) -> dict[str, str]:
    """The queues the SDK publisher writes: `*_QUEUE = "..."` in shared/adapters/queue/handler.py (read with `ast`)."""
    tree = ast.parse((root / "shared" / "adapters" / "queue" / "handler.py").read_text())
    return {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id.endswith("_QUEUE")
    }


def function_app_bindings(root: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Decorators of each function in function_app.py: {function: {decorator: [kwargs, ...]}}.

    Read with `ast` (no import): literal keyword values, module-level string constants resolved.
    """
    tree = ast.parse((root / "function_app.py").read_text())
    constants = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def literal(node: ast.expr) -> Any:
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        try:
            return ast.literal_eval(node)
        except ValueError:
            return ast.unparse(node)

    functions: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decorators: dict[str, list[dict[str, Any]]] = {}
        name = node.name
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute):
                kwargs = {k.arg: literal(k.value) for k in deco.keywords if k.arg}
                if deco.func.attr == "function_name" and deco.args:
                    name = literal(deco.args[0])
                decorators.setdefault(deco.func.attr, []).append(kwargs)
        functions[name] = decorators
    return functions


ENV_ITEM = ({"name", "value"}, {"name", "secretRef"})  # a value, or a reference to one of the app's secrets


def app_env(root: Path) -> dict[str, Any]:
    """Every env var app.bicep can set: name -> value (pycep expression)."""
    tree = parse(root / "infra" / "modules" / "app.bicep")
    env: dict[str, Any] = {}
    for var in tree.get("variables", {}).values():
        value = var["value"]
        if (
            isinstance(value, list)
            and value
            and all(isinstance(i, dict) and set(i) in ENV_ITEM for i in value)
        ):
            env.update({item["name"]: item.get("value", {"secretRef": item.get("secretRef")}) for item in value})
    return env


# the servicebus.bicep / app.bicep parameter naming the queue each Service Bus trigger reads
INPUT_QUEUE_PARAMS = {"payments": "inputQueueName", "risk_outcomes": "outcomesQueueName"}


def _one(bindings: dict[str, Any], decorator: str) -> list[tuple[str, dict[str, Any]]]:
    return [(fn, kw) for fn, decos in bindings.items() for kw in decos.get(decorator, [])]


def check_function_app(root: Path, setting_names: tuple[str, ...]) -> list[str]:
    """Queues, identity connections (P30), the blob webhook (P29), probes (P9, P10) and settings
    agree with function_app.py; app.bicep sets every setting the code reads, and its
    `serviceSettings` (the code's own) none that the code does not read."""
    bindings = function_app_bindings(root)
    infra = root / "infra"
    sb, app, main = (parse(infra / p) for p in ("modules/servicebus.bicep", "modules/app.bicep", "main.bicep"))
    env = app_env(root)
    host = json.loads((root / "host.json").read_text())
    findings: list[str] = []

    rules = rule_list(app, "scaleRules")
    keda = [r["custom"]["metadata"] for r in rules if r.get("custom", {}).get("type") == "azure-servicebus"]
    watched = [_param_default(app, m["queueName"]) for m in keda]
    read = [trig["queue_name"] for _, trig in _one(bindings, "service_bus_queue_trigger")]
    for fn, trig in _one(bindings, "service_bus_queue_trigger"):
        queue = trig["queue_name"]
        # each trigger's queue is a servicebus.bicep parameter (inputQueueName: payments; outcomesQueueName: ...)
        param = INPUT_QUEUE_PARAMS.get(fn, "")
        declared = {
            f"servicebus.bicep {param}": sb["parameters"].get(param, {}).get("default"),
            f"app.bicep {param}": app["parameters"].get(param, {}).get("default"),
        }
        if param == "inputQueueName":
            declared["main.bicep var inputQueueName"] = main["variables"]["inputQueueName"]["value"]
        for where, value in declared.items():
            if value != queue:
                findings.append(f"{where} is {value!r}; function {fn} reads queue {queue!r}")
        if watched.count(queue) != 1:
            findings.append(f"app.bicep: no one azure-servicebus KEDA rule watches {queue!r}")
        findings += _connection(env, fn, trig["connection"], "__fullyQualifiedNamespace")
    findings += [f"app.bicep: a KEDA rule watches {q!r}, which no trigger reads" for q in watched if q not in read]
    outputs = set(sb["parameters"]["outputQueueNames"].get("default", []))
    for fn, out in _one(bindings, "service_bus_queue_output"):
        if out["queue_name"] not in outputs:
            findings.append(
                f"function {fn} writes queue {out['queue_name']!r}, not in servicebus.bicep outputQueueNames"
            )
        findings += _connection(env, fn, out["connection"], "__fullyQualifiedNamespace")
    for name, queue in sdk_output_queues(root).items():  # results go through the SDK publisher
        if queue not in outputs:
            findings.append(
                f"shared/adapters/queue/handler.py {name} is {queue!r}, not in servicebus.bicep outputQueueNames"
            )
        findings += _connection(env, "payments (SDK publisher)", "ServiceBusConnection", "__fullyQualifiedNamespace")

    for fn, blob in _one(bindings, "blob_trigger"):
        findings += _connection(env, fn, blob["connection"], "__blobServiceUri")
        container = blob["path"].split("/", 1)[0]
        if container.startswith("%") and container.strip("%") not in env:
            findings.append(f"function {fn}: app setting {container.strip('%')} (blob path) is not set")
        hook = (infra / "hooks" / "eventgrid-subscription.sh").read_text()
        default = re.search(r'BLOB_TRIGGER_FUNCTION="\$\{BLOB_TRIGGER_FUNCTION:-(\w+)\}"', hook)
        if not default or default.group(1) != fn:
            findings.append(f"eventgrid-subscription.sh: webhook function is not {fn!r}")
        suffix = "/" + blob["path"].rsplit("/", 1)[-1]
        if f'--subject-ends-with "{suffix}"' not in hook:
            findings.append(f"eventgrid-subscription.sh: subscription does not end with {suffix!r}")

    prefix = host.get("extensions", {}).get("http", {}).get("routePrefix", "api")
    routes = [(fn, kw) for fn, kw in _one(bindings, "route")]
    probes = _var_text(app, "probes")
    for probe in probes:
        if "httpGet" not in probe:
            continue  # a TCP probe asks no route
        path = probe["httpGet"]["path"]
        if path in HOST_ANONYMOUS_PATHS:
            continue  # the host's own endpoint, not a function route (P9)
        served = [(fn, kw) for fn, kw in routes if re.fullmatch(_route_regex(prefix, kw.get("route", fn)), path)]
        # NOTE: which of several matching routes answers depends on the host's ordering of
        # function names; that is function_app.py's own test. Here: one serves it anonymously.
        if not any("ANONYMOUS" in str(kw.get("auth_level")) for _, kw in served):
            findings.append(f"app.bicep: probe {path} is not served anonymously by function_app.py")

    missing = [n for n in setting_names if n not in env]
    if missing:
        findings.append(f"app.bicep does not set the app settings {missing}")
    unread = [s["name"] for s in _var_text(app, "serviceSettings") if s["name"] not in setting_names]
    if unread:
        findings.append(f"app.bicep serviceSettings sets {unread}, which the code does not read")
    return findings


def _route_regex(prefix: str, route: str) -> str:
    pattern = re.sub(r"\{\*\w+\}", ".*", route)
    pattern = re.sub(r"\{\w+(:[^}]*)?\}", "[^/]+", pattern)
    return f"/{prefix}/{pattern}" if prefix else f"/{pattern}"


def _connection(env: dict[str, Any], fn: str, connection: str, suffix: str) -> list[str]:
    out = []
    for key in (f"{connection}{suffix}", f"{connection}__credential", f"{connection}__clientId"):
        if key not in env:
            out.append(f"function {fn}: connection {connection!r} needs app setting {key}")
    return out
