"""Checks of what the platform does with the template: probes and the host's throttle, the
ports the host never sees, the GPU build azd asks for, moving the app between workload
profiles, and azd's hooks on Windows. Each names the docs/platform.md rows it enforces.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from .contract import HOST_ANONYMOUS_PATHS, _catalogue, _var_text, app_env, rule_list
from .parsing import parse

# P23: KEDA scalers that measure the replicas themselves, whatever port the work came in on.
TRANSPORT_AGNOSTIC_SCALERS = frozenset({"cpu", "memory"})
# P14: what the app's core records for every scored event, whatever its port or trigger.
EVERY_PORT_METRICS = frozenset({"scoring.requests.shed", "scoring.stage.duration"})


def _app(root: Path) -> dict[str, Any]:
    return parse(root / "infra" / "modules" / "app.bicep")


def check_probes(root: Path) -> list[str]:
    """The liveness probe is one the host's HTTP throttle cannot answer with 429.

    The throttle runs for every request whose path is not under /admin (P8), so past
    maxOutstandingRequests a function route answers 429 and Container Apps counts a failed
    probe (any status outside 200..399, P10): liveness must be a TCP probe or a host admin
    endpoint that needs no key (P9).
    """
    probes = _var_text(_app(root), "probes")
    findings = []
    liveness = [p for p in probes if str(p.get("type")).lower() == "liveness"]
    if len(liveness) != 1:
        return [f"app.bicep: expected one Liveness probe, found {len(liveness)}"]
    probe = liveness[0]
    if "tcpSocket" in probe:
        return []
    path = str(probe.get("httpGet", {}).get("path", ""))
    if not (path == "/admin" or path.startswith("/admin/")):
        findings.append(f"app.bicep: the Liveness probe {path} passes the host's HTTP throttle (429 under load: P8)")
    elif path not in HOST_ANONYMOUS_PATHS:
        findings.append(f"app.bicep: the Liveness probe {path} is no anonymous host endpoint (P9)")
    return findings


def _scale_rules(tree: dict[str, Any]) -> list[dict[str, Any]]:
    return rule_list(tree, "scaleRules")


def _alert_metrics(root: Path) -> set[str]:
    names: set[str] = set()
    for path in sorted((root / "infra").rglob("*.bicep")):
        tree = parse(path)
        for res in tree.get("resources", {}).values():
            if res["type"].lower() != "microsoft.insights/scheduledqueryrules":
                continue
            config = res["config"]
            for criterion in config["properties"]["criteria"]["allOf"]:
                query = str(_var_text(tree, criterion["query"]))
                names |= set(re.findall(r"customMetrics\s*\|\s*where\s+name\s*==\s*\\?'([^'\\]+)", query))
    return names


def check_extra_ports_observed(root: Path) -> list[str]:
    """Traffic on the additional TCP ports scales the app and raises alerts.

    The host never sees those ports, so neither its `requests` table nor the HTTP scale rule
    counts them (P13, P14): a scale rule that measures the replicas themselves (KEDA cpu or
    memory, P23) and log alerts over metrics the core records for every port (P14) must.
    """
    tree = _app(root)
    ingress = tree["resources"]["app"]["config"]["properties"]["configuration"]["ingress"]
    if not ingress.get("additionalPortMappings"):
        return []
    findings = []
    scalers = {r["custom"].get("type") for r in _scale_rules(tree) if isinstance(r.get("custom"), dict)}
    if not scalers & TRANSPORT_AGNOSTIC_SCALERS:
        findings.append(
            "app.bicep: additional ports are mapped, but no scale rule sees their load "
            f"(one of {sorted(TRANSPORT_AGNOSTIC_SCALERS)}: P14, P23)"
        )
    catalogue = _catalogue(root)
    for metric in sorted(EVERY_PORT_METRICS - _alert_metrics(root)):
        findings.append(f"alerts: no alert reads {metric!r}, which every port records (P14)")
    for metric in sorted(EVERY_PORT_METRICS - set(catalogue)):
        findings.append(f"shared/telemetry/catalogue.py: no metric {metric!r} (P14)")
    return findings


def _envsubst(template: str, env: dict[str, str]) -> str:
    """azd's expansion of one build arg (P20): ${V}, ${V=default}, ${V/pattern/replacement}, ${V//...}."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        value = env.get(name)
        if op == "=":
            return rest if value is None else value
        if op in ("/", "//"):
            pattern, _, replacement = rest.partition("/")
            return (value or "").replace(pattern, replacement, -1 if op == "//" else 1)
        return value or ""

    return re.sub(r"\$\{(\w+)(//|/|=)?([^}]*)\}", one, template)


def check_gpu_build(root: Path) -> list[str]:
    """`azd up` builds the GPU image exactly when it deploys to the GPU, and readiness knows.

    azd expands docker.buildArgs from its environment (P20): the build arg the Dockerfile reads
    must follow the same variable main.parameters.json turns into enableGpu, for `true`,
    `false` and unset alike; and the app requires the GPU it is given (ORT_REQUIRE_GPU).
    """
    import yaml

    findings = []
    services = yaml.safe_load((root / "azure.yaml").read_text()).get("services", {})
    docker = next(iter(services.values()), {}).get("docker", {})
    build_args = dict(str(a).split("=", 1) for a in docker.get("buildArgs", []) if "=" in str(a))
    dockerfile = (root / "Dockerfile").read_text()
    wants = re.search(r'"\$ORT_GPU"\s*=\s*"([^"]+)"', dockerfile)
    parameters = json.loads((root / "infra" / "main.parameters.json").read_text())["parameters"]
    gpu_param = re.fullmatch(r"\$\{(\w+)=(\w+)\}", str(parameters.get("enableGpu", {}).get("value", "")))
    if not wants or not gpu_param:
        return ["Dockerfile or main.parameters.json: no ORT_GPU switch or no ${VAR=default} for enableGpu"]
    variable, default = gpu_param.groups()
    if "ORT_GPU" not in build_args:
        findings.append("azure.yaml: docker.buildArgs passes no ORT_GPU: `azd up` builds the CPU image on a GPU (P20)")
    else:
        for value in ("true", "false", None):
            env = {} if value is None else {variable: value}
            on_gpu = (value if value is not None else default) == "true"
            gpu_build = _envsubst(build_args["ORT_GPU"], env) == wants.group(1)
            if on_gpu != gpu_build:
                findings.append(
                    f"azure.yaml: with {variable}={value or '<unset>'} the app runs on "
                    f"{'the GPU' if on_gpu else 'CPU'} but ORT_GPU={_envsubst(build_args['ORT_GPU'], env)!r} (P20)"
                )
    env_vars = app_env(root)
    if env_vars.get("ORT_REQUIRE_GPU") != env_vars.get("ORT_USE_GPU") or "useGpu" not in json.dumps(
        env_vars.get("ORT_REQUIRE_GPU")
    ):
        findings.append("app.bicep: ORT_REQUIRE_GPU must follow useGpu as ORT_USE_GPU does (readiness on a GPU)")
    return findings


def _bool_expr(text: str, values: dict[str, bool]) -> bool:
    python = text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    if not re.fullmatch(r"[\w\s()]+", python):
        raise ValueError(text)
    return bool(eval(python, {"__builtins__": {}}, dict(values)))  # noqa: S307 - identifiers and and/or/not only


def check_profile_moves(root: Path) -> list[str]:
    """The app always runs on a profile its environment has, and a move keeps the profile it leaves.

    An app names the workload profile it runs on (P22); main.bicep deploys the environment
    before the app, so a deployment that moves the app and removes the old profile would
    remove it while the app still runs there. The profile list is the union the keep flags
    say; with the defaults the move to the GPU keeps the CPU pool, and with keepGpuProfile the
    move back keeps the GPU (docs/deploy.md's two steps).
    """
    text = (root / "infra" / "modules" / "environment.bicep").read_text()
    tree = parse(root / "infra" / "modules" / "environment.bicep")
    flags = {m.group(1): m.group(2) for m in re.finditer(r"^var (hasCpuPool|hasGpuProfile) = (.+)$", text, re.M)}
    uses = "hasCpuPool ? [dedicatedProfile]" in text and "hasGpuProfile ? [gpuProfile]" in text
    output = re.search(
        r"^output appProfileName string = enableGpu \? gpuProfile\.name : dedicatedProfile\.name$", text, re.M
    )
    if set(flags) != {"hasCpuPool", "hasGpuProfile"} or not uses or not output:
        return ["environment.bicep: workloadProfiles must be built from hasCpuPool and hasGpuProfile (P22)"]
    params = {name: tree["parameters"][name].get("default") for name in ("enableGpu", "keepCpuPool", "keepGpuProfile")}

    def profiles(state: dict[str, bool]) -> set[str]:
        return {
            name
            for name, flag in (("scoring", "hasCpuPool"), ("gpu", "hasGpuProfile"))
            if _bool_expr(flags[flag], state)
        }

    def app_on(state: dict[str, bool]) -> str:
        return "gpu" if state["enableGpu"] else "scoring"

    findings = []
    for values in itertools.product((False, True), repeat=3):
        state = dict(zip(("enableGpu", "keepCpuPool", "keepGpuProfile"), values, strict=True))
        if app_on(state) not in profiles(state):
            findings.append(f"environment.bicep: {state}: the app's profile {app_on(state)!r} is not in the list (P22)")
    to_gpu = {**params, "enableGpu": True}
    if "scoring" not in profiles(to_gpu):
        findings.append(
            "environment.bicep: moving to the GPU with the defaults removes the CPU pool the app leaves (P22)"
        )
    back = {**params, "enableGpu": False, "keepGpuProfile": True}
    if "gpu" not in profiles(back):
        findings.append(
            "environment.bicep: moving back with keepGpuProfile removes the GPU profile the app leaves (P22)"
        )
    return findings


def check_windows_hooks(root: Path) -> list[str]:
    """A hook azd runs on Linux and macOS also has a Windows block, so a Windows `azd up` never
    finishes without it (P21: azd picks `windows` on Windows, `posix` elsewhere)."""
    import yaml

    hooks = yaml.safe_load((root / "azure.yaml").read_text()).get("hooks", {}) or {}
    findings = []
    for name, hook in hooks.items():
        if isinstance(hook, dict) and "posix" in hook and "windows" not in hook:
            findings.append(f"azure.yaml: hook {name} has no windows block: a Windows azd run skips it (P21)")
        windows = hook.get("windows") if isinstance(hook, dict) else None
        if isinstance(windows, dict) and not (root / str(windows.get("run", ""))).is_file():
            findings.append(f"azure.yaml: hook {name}'s windows script {windows.get('run')!r} is missing")
    return findings


def check_base_image_pinned(root: Path) -> list[str]:
    """Every FROM of the Dockerfile names its image by digest: a tag can be moved to another image,
    a digest cannot (P32), so a rebuild of the same commit runs the same host and worker."""
    findings = []
    for line in (root / "Dockerfile").read_text().splitlines():
        image = re.match(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", line)
        if image and not re.search(r"@sha256:[0-9a-f]{64}$", image.group(1)):
            findings.append(f"Dockerfile: {image.group(1)} is a tag, not a digest (P32)")
    return findings
