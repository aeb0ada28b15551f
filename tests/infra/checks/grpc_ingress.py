"""The V2 gRPC port: served by the app process on GRPC_PORT, mapped by the Container App's
ingress as an additional port that stays inside the environment (no function key guards it)."""

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
    """One internal port mapping, on the port the GRPC_PORT app setting names."""
    tree = parse(root / "infra" / "modules" / "app.bicep")
    setting = app_env(root).get("GRPC_PORT")
    if not isinstance(setting, dict) or setting.get("function", {}).get("type") != "string":
        return [f"app.bicep: GRPC_PORT must be string(<the port param>), got {setting!r}"]
    port_param = setting["function"]["parameters"]["value_to_convert"]
    mappings = _ingress(tree).get("additionalPortMappings") or []
    findings = []
    if len(mappings) != 1:
        findings.append(f"app.bicep: expected one additionalPortMappings entry for gRPC, got {len(mappings)}")
    for mapping in mappings:
        if mapping.get("external") is not False:
            findings.append("app.bicep: the gRPC port mapping must be internal (external: false)")
        for key in ("targetPort", "exposedPort"):
            if mapping.get(key) != port_param:
                findings.append(f"app.bicep: gRPC {key} is {mapping.get(key)!r}, GRPC_PORT is {port_param!r}")
    if port_param not in tree.get("parameters", {}):
        findings.append(f"app.bicep: GRPC_PORT's {port_param!r} is not a parameter")
    return findings
