"""The scale rules the simulation obeys, read from infra/ itself (and host.json), never typed in.

A small reader of the few values the simulation needs, not a Bicep parser: pycep-parser lives in
.venv-infra only (tests/infra), and the simulation runs from .venv. Each value is found by one
anchored pattern in the file that declares it; a value that is missing, or a rule that no longer
reads its parameter, raises `InfraReadError` instead of falling back to a guess
(tests/bench/test_flashsale_infra.py breaks the real files on purpose and watches it fail).

What is read, and from where:
- the sizing profile azd deploys (infra/main.parameters.json's `${SCORING_PROFILE=dev}`, or the one
  named), its replica bounds, thresholds and sale figures from main.bicep's `var profiles`, and an
  override where main.parameters.json's default for `minReplicas` & co. is not 0 (main.bicep:
  0 = the profile's; the floor is at least 2 either way); the CPU rule's default in app.bicep;
- the three KEDA rules in app.bicep's `scaleRules` (payments-queue-depth `messageCount`,
  http-concurrency `concurrentRequests`, cpu-all-ports `value`) and whether the `scale` block the
  hook PATCHes sets `pollingInterval`/`cooldownPeriod` (absent: the platform defaults, below);
- replicas per node (main.bicep `replicasPerNode`), the readiness probe's period, the admission
  settings the app runs with (app.bicep's env: MAX_INFLIGHT, MAX_QUEUED, MAX_QUEUE_WAIT_MS,
  QUEUE_TARGET_MS, REQUEST_TIMEOUT_MS), and host.json's HTTP throttle and Service Bus batch size.

Platform defaults when the scale block sets none (azure-docs `articles/container-apps/scale-app.md`
@ b73f868, "Scale behavior", the commit docs/platform.md cites): polling interval 30 s, cool down
300 s, scale-up step "1, 4, 100% of current", scale-down stabilization window 300 s,
`desiredReplicas = ceil(currentMetricValue / targetMetricValue)`; the HTTP rule: "Every 15 seconds,
the number of concurrent requests is calculated as the number of requests in the past 15 seconds
divided by 15".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["PLATFORM", "InfraReadError", "Platform", "ScaleRules", "read_profiles", "read_scale_rules"]

REPO = Path(__file__).resolve().parents[2]


class InfraReadError(ValueError):
    """A value the simulation needs is not where infra/ declared it: fix the reader or the file."""


@dataclass(frozen=True)
class Platform:
    """Container Apps' documented scale behaviour (scale-app.md @ b73f868, "Scale behavior")."""

    polling_interval_s: float = 30.0  # custom (KEDA) rules; "doesn't apply to HTTP and TCP scale rules"
    cooldown_s: float = 300.0
    http_window_s: float = 15.0  # "every 15 seconds ... requests in the past 15 seconds divided by 15"
    scale_down_window_s: float = 300.0  # "Scale down stabilization window"
    hpa_sync_s: float = 15.0  # NOTE: the CPU rule is a Kubernetes resource metric; HPA's default sync period


PLATFORM = Platform()


@dataclass(frozen=True)
class ScaleRules:
    """Everything in infra/ and host.json that decides how the fleet scales and sheds."""

    profile: str
    min_replicas: int
    max_replicas: int
    sale_replicas: int  # the profile's replicas for a sale window (the calendar's cron rule)
    sale_lead_s: float  # how long before the burst the profile's window opens
    http_concurrent_requests: int
    queue_messages_per_replica: int
    cpu_utilization_pct: int
    polling_interval_s: float
    cooldown_s: float
    replicas_per_node: int
    replica_vcpu: float
    readiness_period_s: float
    max_inflight: int
    max_queued: int
    max_queue_wait_ms: float
    queue_target_ms: float
    request_timeout_ms: float
    host_max_outstanding: int
    host_max_concurrent: int
    max_message_batch: int

    def with_(self, **changes: float) -> ScaleRules:
        """The same rules with some values changed (what the capacity command tries)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _find(pattern: str, text: str, what: str, where: Path) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise InfraReadError(f"{what} not found in {where.relative_to(REPO) if where.is_relative_to(REPO) else where}")
    return match.group(1)


def _param(text: str, name: str, where: Path) -> str:
    return _find(rf"^param {name} \w+ = '?([\w.]+)'?\s*$", text, f"param {name}", where)


def _env(text: str, name: str, where: Path) -> str:
    return _find(rf"\{{ name: '{name}', value: '([^']*)' \}}", text, f"app setting {name}", where)


def _block(text: str, start: str, where: Path) -> str:
    """The text of the bracketed block that opens at the first line matching `start`."""
    match = re.search(start, text, re.MULTILINE)
    if match is None:
        raise InfraReadError(f"{start!r} not found in {where.name}")
    depth, i = 0, match.end() - 1
    for j in range(i, len(text)):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i : j + 1]
    raise InfraReadError(f"{start!r} is never closed in {where.name}")


def _rule(rules: str, name: str, key: str, param: str, where: Path) -> None:
    """The rule `name` exists and its metadata `key` reads the parameter `param`."""
    found = re.search(rf"name: '{name}'(.*?)(?=\n  \}}\n|\Z)", rules, re.DOTALL)
    if found is None:
        raise InfraReadError(f"scale rule {name} not found in {where.name}")
    if not re.search(rf"\b{key}: string\({param}\)", found.group(1)):
        raise InfraReadError(f"scale rule {name} does not set {key} from {param} in {where.name}")


def _azd_default(parameters: dict[str, object], name: str, where: Path) -> int:
    try:
        value = str(parameters[name]["value"])  # type: ignore[index]
    except (KeyError, TypeError) as exc:
        raise InfraReadError(f"parameter {name} not found in {where.name}") from exc
    match = re.fullmatch(r"\$\{\w+=(\d+)\}|(\d+)", value)
    if match is None:
        raise InfraReadError(f"parameter {name} in {where.name} has no integer default: {value!r}")
    return int(match.group(1) or match.group(2))


def _azd_profile(parameters: dict[str, object], where: Path) -> str:
    try:
        value = str(parameters["scoringProfile"]["value"])  # type: ignore[index]
    except (KeyError, TypeError) as exc:
        raise InfraReadError(f"parameter scoringProfile not found in {where.name}") from exc
    match = re.fullmatch(r"\$\{\w+=(\w+)\}|(\w+)", value)
    if match is None:
        raise InfraReadError(f"parameter scoringProfile in {where.name} has no default: {value!r}")
    return match.group(1) or match.group(2)


def read_profiles(root: Path = REPO) -> dict[str, dict[str, int]]:
    """main.bicep's `var profiles`: each profile's integer figures by name."""
    main_path = root / "infra/main.bicep"
    block = _block(main_path.read_text(), r"^var profiles = \{", main_path)
    found: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"^  (\w+): \{\n(.*?)^  \}", block, re.MULTILINE | re.DOTALL):
        found[name] = {key: int(value) for key, value in re.findall(r"^    (\w+): (\d+)\s*$", body, re.MULTILINE)}
    if not found:
        raise InfraReadError("var profiles has no profile in main.bicep")
    return found


def read_scale_rules(root: Path = REPO, profile: str | None = None) -> ScaleRules:
    """The scale rules as infra/ (and host.json) declare them today, for the profile azd deploys by
    default (`SCORING_PROFILE`) or the one named."""
    app_path, main_path = root / "infra/modules/app.bicep", root / "infra/main.bicep"
    params_path, host_path = root / "infra/main.parameters.json", root / "host.json"
    app, main = app_path.read_text(), main_path.read_text()
    parameters = json.loads(params_path.read_text())["parameters"]
    host = json.loads(host_path.read_text())["extensions"]
    profile = profile or _azd_profile(parameters, params_path)
    profiles = read_profiles(root)
    if profile not in profiles:
        raise InfraReadError(f"profile {profile!r} is not in main.bicep's profiles ({', '.join(profiles)})")
    sizing = profiles[profile]

    def sized(name: str) -> int:
        override = _azd_default(parameters, name, params_path)
        if override:
            return override
        if name not in sizing:
            raise InfraReadError(f"profile {profile!r} in main.bicep sets no {name}")
        return sizing[name]

    for name in ("saleReplicas", "saleLeadMinutes"):
        if name not in sizing:
            raise InfraReadError(f"profile {profile!r} in main.bicep sets no {name}")
    if not re.search(r"^var scaleRules = concat\(baseRules, saleRules\)\s*$", app, re.MULTILINE):
        raise InfraReadError("app.bicep's scaleRules no longer joins the sale calendar's rules (saleRules)")
    rules = _block(app, r"^var baseRules = \[", app_path)
    _rule(rules, "payments-queue-depth", "messageCount", "queueMessagesPerReplica", app_path)
    _rule(rules, "http-concurrency", "concurrentRequests", "httpConcurrentRequests", app_path)
    _rule(rules, "cpu-all-ports", "value", "cpuScaleUtilization", app_path)
    scale = _block(app, r"^output scale object = \{", app_path)
    if not re.search(r"^\s*rules: scaleRules\s*$", scale, re.MULTILINE):
        raise InfraReadError("the scale output does not carry scaleRules (the hook PATCHes nothing)")
    polling = re.search(r"pollingInterval: (\d+)", scale)
    cooldown = re.search(r"cooldownPeriod: (\d+)", scale)
    readiness = _find(
        r"type: 'Readiness'\n(?:.*\n){0,8}?\s*periodSeconds: (\d+)", app, "the readiness probe's period", app_path
    )
    try:
        http, bus = host["http"], host["serviceBus"]
        outstanding, concurrent = int(http["maxOutstandingRequests"]), int(http["maxConcurrentRequests"])
        batch = int(bus["maxMessageBatchSize"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InfraReadError(f"host.json lacks the HTTP throttle or the Service Bus batch size: {exc}") from exc
    floor = max(2, sized("minReplicas"))  # NOTE: main.bicep's max(2, ...)
    return ScaleRules(
        profile=profile,
        min_replicas=floor,
        max_replicas=max(floor, sized("maxReplicas")),
        sale_replicas=sizing["saleReplicas"],
        sale_lead_s=sizing["saleLeadMinutes"] * 60.0,
        http_concurrent_requests=sized("httpConcurrentRequests"),
        queue_messages_per_replica=sized("queueMessagesPerReplica"),
        cpu_utilization_pct=int(_param(app, "cpuScaleUtilization", app_path)),
        polling_interval_s=float(polling.group(1)) if polling else PLATFORM.polling_interval_s,
        cooldown_s=float(cooldown.group(1)) if cooldown else PLATFORM.cooldown_s,
        replicas_per_node=int(_find(r"^var replicasPerNode = (\d+)\s*$", main, "var replicasPerNode", main_path)),
        replica_vcpu=float(_param(main, "replicaCpu", main_path)),
        readiness_period_s=float(readiness),
        max_inflight=int(_env(app, "MAX_INFLIGHT", app_path)),
        max_queued=int(_env(app, "MAX_QUEUED", app_path)),
        max_queue_wait_ms=float(_env(app, "MAX_QUEUE_WAIT_MS", app_path)),
        queue_target_ms=float(_env(app, "QUEUE_TARGET_MS", app_path)),
        request_timeout_ms=float(_env(app, "REQUEST_TIMEOUT_MS", app_path)),
        host_max_outstanding=outstanding,
        host_max_concurrent=concurrent,
        max_message_batch=batch,
    )
