"""The two Redis roles main.bicep provisions: the cache (predictions with a TTL, the native
feature layout) and, when deployed, Feast's online store. Names the docs/platform.md rows
it enforces.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .contract import app_env
from .parsing import parse

REDIS_MODULE = "modules/redis.bicep"
DATABASE = "microsoft.cache/redisenterprise/databases"
# P41: volatile-lru evicts only keys with a TTL (predictions; the native layout's features have
# none); Feast's hashes carry one when Feast sets key_ttl_seconds, so its store must not evict.
CACHE_EVICTION = "VolatileLRU"
FEAST_EVICTION = "NoEviction"
# P42: the native layout reads with MGET across hash slots: Enterprise clustering only.
CACHE_CLUSTERING = "EnterpriseCluster"


def _modules(main: dict[str, Any]) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """main.bicep's instances of redis.bicep: {symbol: (condition or None, params)}."""
    found = {}
    for symbol, module in main.get("modules", {}).items():
        if module.get("detail", {}).get("path") != REDIS_MODULE:
            continue
        config = module["config"]
        condition = config.get("condition")
        body = config["config"] if condition is not None else config
        found[symbol] = (condition, body.get("params", {}))
    return found


def _value(tree: dict[str, Any], value: Any) -> Any:
    """A bare identifier naming a parameter (its default) or a variable (its value); else as written."""
    if isinstance(value, str) and value in tree.get("parameters", {}):
        return tree["parameters"][value].get("default")
    if isinstance(value, str) and value in tree.get("variables", {}):
        return tree["variables"][value]["value"]
    return value


def _database_setting(redis: dict[str, Any], main: dict[str, Any], args: dict[str, Any], prop: str) -> Any:
    """A database property as one instance of redis.bicep gets it: literal, or a module parameter
    set by main.bicep's arguments (resolved in main) or left at its default."""
    dbs = [r["config"] for r in redis["resources"].values() if r["type"].lower() == DATABASE]
    if len(dbs) != 1:
        return None
    value = dbs[0]["properties"].get(prop)
    if isinstance(value, str) and value in redis.get("parameters", {}):
        return _value(main, args[value]) if value in args else redis["parameters"][value].get("default")
    return value


def _accessor(expr: Any) -> list[str]:
    """`a.b.c` as ['a', 'b', 'c'] (pycep's nested property_accessor); [] for anything else."""
    if isinstance(expr, str):
        return [expr]
    op = expr.get("operator", {}) if isinstance(expr, dict) else {}
    if op.get("type") != "property_accessor":
        return []
    head = _accessor(op["operands"]["operand_1"])
    tail = _accessor(op["operands"]["operand_2"])
    return head + tail if head and tail else []


def _url_of(expr: Any) -> str:
    """The rediss:// URL an expression builds, as text ('' when it is no such string)."""
    return expr if isinstance(expr, str) and expr.startswith("rediss://") else ""


def check_redis_stores(root: Path) -> list[str]:
    """The cache Redis keeps VolatileLRU (P41: only keys with a TTL, the predictions, are evicted;
    the native layout's features carry none) and EnterpriseCluster (P42: the native layout's MGET
    crosses hash slots, which OSS clustering refuses with CROSSSLOT). Feast's online store, when
    main.bicep deploys it (a bool parameter, false by default: deployments without it unchanged),
    is a redis.bicep of its own with NoEviction (P41: Feast's hashes carry a TTL under
    key_ttl_seconds, and volatile-lru would evict them beside the predictions), and the app's
    FEAST_REDIS_URL is rediss://its host:its port when it is deployed.
    """
    infra = root / "infra"
    main = parse(infra / "main.bicep")
    redis = parse(infra / "modules" / "redis.bicep")
    instances = _modules(main)
    app_args = main.get("modules", {}).get("app", {}).get("config", {}).get("params", {})
    findings: list[str] = []

    host = _accessor(app_args.get("redisHost"))
    cache = host[0] if len(host) == 3 and host[1:] == ["outputs", "hostName"] else None
    if cache not in instances:
        return [f"main.bicep: the app's redisHost is not a redis.bicep module's outputs.hostName ({host})"]
    args = instances[cache][1]
    if (eviction := _database_setting(redis, main, args, "evictionPolicy")) != CACHE_EVICTION:
        findings.append(
            f"main.bicep: the cache Redis ({cache}) evicts with {eviction!r}, not {CACHE_EVICTION!r} "
            "(predictions carry a TTL, the native layout's features none: P41)"
        )
    if (clustering := _database_setting(redis, main, args, "clusteringPolicy")) != CACHE_CLUSTERING:
        findings.append(
            f"main.bicep: the cache Redis ({cache}) clusters with {clustering!r}, not {CACHE_CLUSTERING!r} "
            "(the native layout's MGET crosses hash slots: CROSSSLOT under OSS clustering, P42)"
        )

    feast = {symbol: spec for symbol, spec in instances.items() if symbol != cache}
    if len(feast) != 1:
        return [*findings, f"main.bicep: expected one Feast online-store Redis beside the cache, found {sorted(feast)}"]
    ((symbol, (condition, args)),) = feast.items()
    flag = main.get("parameters", {}).get(condition) if isinstance(condition, str) else None
    if not (flag and flag.get("type") == "bool" and flag.get("default") is False):
        findings.append(f"main.bicep: {symbol} is not deployed on a bool parameter defaulting to false ({condition!r})")
    if (eviction := _database_setting(redis, main, args, "evictionPolicy")) != FEAST_EVICTION:
        findings.append(
            f"main.bicep: the Feast online store ({symbol}) evicts with {eviction!r}, not {FEAST_EVICTION!r} "
            "(Feast's hashes carry a TTL under key_ttl_seconds: P41)"
        )

    expected = f"rediss://${{{symbol}.outputs.hostName}}:${{{symbol}.outputs.port}}"
    url = app_args.get("feastRedisUrl")
    op = url.get("operator", {}) if isinstance(url, dict) else {}
    operands = op.get("operands", {})
    if op.get("type") != "conditional" or operands.get("condition") != condition:
        findings.append(f"main.bicep: the app's feastRedisUrl does not follow {condition!r} (FEAST_REDIS_URL, P41)")
    elif re.sub(r"\s", "", _url_of(operands.get("true_value"))) != expected:
        findings.append(
            f"main.bicep: with {condition} the app's feastRedisUrl is {operands.get('true_value')!r}, "
            f"not {expected!r} (FEAST_REDIS_URL must reach the NoEviction store: P41)"
        )
    if app_env(root).get("FEAST_REDIS_URL") != "feastRedisUrl":
        findings.append("app.bicep: FEAST_REDIS_URL is not the feastRedisUrl parameter (P41)")
    return findings
