"""The ports the worker process serves itself (the V2 gRPC server on GRPC_PORT, the fast lane on
FAST_LANE_PORT), each mapped by the Container App's ingress as an additional port that stays inside
the environment (no function key guards them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .contract import app_env
from .parsing import parse


def _ingress(tree: dict[str, Any]) -> dict[str, Any]:
    app = tree["resources"]["app"]["config"]
    ingress: dict[str, Any] = app["properties"]["configuration"]["ingress"]
    return ingress


# Each app setting naming a port the worker process serves itself, and what it serves.
INTERNAL_PORTS = {"GRPC_PORT": "gRPC", "FAST_LANE_PORT": "fast lane"}


def check_grpc_ingress(root: Path) -> list[str]:
    """One internal port mapping per port the worker serves itself (GRPC_PORT, FAST_LANE_PORT),
    on the port its app setting names, and no other additional port: `external: false` keeps it
    inside the environment (P24), which is all that guards it, since the host never sees it (P14)."""
    tree = parse(root / "infra" / "modules" / "app.bicep")
    env = app_env(root)
    mappings = _ingress(tree).get("additionalPortMappings") or []
    findings = []
    params: dict[str, str] = {}
    for setting_name, what in INTERNAL_PORTS.items():
        setting = env.get(setting_name)
        if not isinstance(setting, dict) or setting.get("function", {}).get("type") != "string":
            findings.append(f"app.bicep: {setting_name} must be string(<the port param>), got {setting!r}")
            continue
        port_param = setting["function"]["parameters"]["value_to_convert"]
        params[what] = port_param
        if port_param not in tree.get("parameters", {}):
            findings.append(f"app.bicep: {setting_name}'s {port_param!r} is not a parameter")
        mine = [m for m in mappings if m.get("targetPort") == port_param]
        if len(mine) != 1:
            findings.append(f"app.bicep: expected one additionalPortMappings entry for the {what} ({port_param})")
        for mapping in mine:
            if mapping.get("external") is not False:
                findings.append(f"app.bicep: the {what} port mapping must be internal (external: false)")
            if mapping.get("exposedPort") != port_param:
                findings.append(f"app.bicep: {what} exposedPort is {mapping.get('exposedPort')!r}, not {port_param!r}")
    for mapping in mappings:
        if mapping.get("targetPort") not in params.values():
            findings.append(f"app.bicep: port mapping {mapping.get('targetPort')!r} is no port the app serves")
    return findings
