"""The one port the worker process serves itself: the V2 gRPC server on GRPC_PORT, mapped by the
Container App's ingress as an additional port that stays inside the environment (no function key
guards it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .contract import app_env
from .parsing import parse


def _ingress(tree: dict[str, Any]) -> dict[str, Any]:
    app = tree["resources"]["app"]["config"]
    ingress: dict[str, Any] = app["properties"]["configuration"]["ingress"]
    return ingress


def check_grpc_ingress(root: Path) -> list[str]:
    """One internal port mapping for the port GRPC_PORT names, and no other additional port:
    `external: false` keeps it inside the environment (P24), which is all that guards it, since
    the host never sees it (P14)."""
    tree = parse(root / "infra" / "modules" / "app.bicep")
    setting = app_env(root).get("GRPC_PORT")
    if not isinstance(setting, dict) or setting.get("function", {}).get("type") != "string":
        return [f"app.bicep: GRPC_PORT must be string(<the port param>), got {setting!r}"]
    port_param = setting["function"]["parameters"]["value_to_convert"]
    findings = []
    if port_param not in tree.get("parameters", {}):
        findings.append(f"app.bicep: GRPC_PORT's {port_param!r} is not a parameter")
    mappings = _ingress(tree).get("additionalPortMappings") or []
    mine = [m for m in mappings if m.get("targetPort") == port_param]
    if len(mine) != 1:
        findings.append(f"app.bicep: expected one additionalPortMappings entry for gRPC ({port_param})")
    for mapping in mine:
        if mapping.get("external") is not False:
            findings.append("app.bicep: the gRPC port mapping must be internal (external: false)")
        if mapping.get("exposedPort") != port_param:
            findings.append(f"app.bicep: gRPC exposedPort is {mapping.get('exposedPort')!r}, not {port_param!r}")
    for mapping in mappings:
        if mapping.get("targetPort") != port_param:
            findings.append(f"app.bicep: port mapping {mapping.get('targetPort')!r} is no port the app serves")
    return findings
