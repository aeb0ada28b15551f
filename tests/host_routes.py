"""A model of how the Functions host routes HTTP requests to functions.

What the host does (Azure/azure-functions-host: the metadata manager orders functions by
name, ordinal and case-insensitive; the routes manager adds each function's route in that
order to one first-match table; its maintainers confirm there is no route precedence, e.g.
host issue 9876): the first function, in name order, whose route template matches the
path and whose methods include the request's method answers it, with its auth level.

Templates are ASP.NET route templates under host.json's `routePrefix`: literal segments
(case-insensitive), `{name}` (one non-empty segment), `{name?}` (optional, last), `{*name}`
(catch-all, the rest of the path, possibly empty), and the `int`/`alpha` constraints.
Anything else raises, so a new kind of template extends this model before it ships.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HostRoute", "answer", "function_metadata", "route_table", "route_table_of"]

_PARAM = re.compile(r"^\{(?P<star>\*)?(?P<name>\w+)(?::(?P<constraint>\w+))?(?P<optional>\?)?\}$")
_CONSTRAINTS = {None: r"[^/]+", "int": r"-?\d+", "alpha": r"[A-Za-z]+"}


@dataclass(frozen=True)
class HostRoute:
    function: str
    template: str
    methods: frozenset[str]
    auth_level: str
    pattern: re.Pattern[str]


def _compile(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    segments = [s for s in template.split("/") if s]
    for i, segment in enumerate(segments):
        match = _PARAM.match(segment)
        if match is None:
            if "{" in segment or "}" in segment:
                raise NotImplementedError(f"complex segment {segment!r} is not modelled")
            parts.append("/" + re.escape(segment))
            continue
        if match["constraint"] not in _CONSTRAINTS:
            raise NotImplementedError(f"route constraint {match['constraint']!r} is not modelled")
        if match["star"]:
            if i != len(segments) - 1:
                raise NotImplementedError("a catch-all must be the last segment")
            parts.append(r"(?:/.*)?")
        elif match["optional"]:
            parts.append(rf"(?:/{_CONSTRAINTS[match['constraint']]})?")
        else:
            parts.append("/" + _CONSTRAINTS[match["constraint"]])
    return re.compile("^" + "".join(parts) + "/?$", re.IGNORECASE)


def route_table(functions: Iterable[Any], route_prefix: str) -> list[HostRoute]:
    """The host's table from indexed functions (`app.get_functions()`), in the host's order."""
    return route_table_of(function_metadata(functions), route_prefix)


def function_metadata(functions: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """What the worker hands the host when it indexes the app: each function's name and its
    function.json (`{"bindings": [...]}`), as plain data (a copy a test may break on purpose)."""
    return {fn.get_function_name(): json.loads(fn.get_function_json()) for fn in functions}


def route_table_of(metadata: Mapping[str, Mapping[str, Any]], route_prefix: str) -> list[HostRoute]:
    """The host's table from function metadata (name -> function.json), in the host's order."""
    table = []
    for name in sorted(metadata, key=str.upper):
        trigger = next(b for b in metadata[name]["bindings"] if str(b["type"]).endswith("Trigger"))
        if trigger["type"] != "httpTrigger":
            continue
        route = trigger.get("route") or name
        template = "/".join(p for p in (route_prefix.strip("/"), route.strip("/")) if p)
        methods = frozenset(str(m).upper() for m in trigger.get("methods") or ()) or frozenset(
            {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}
        )
        auth = str(trigger.get("authLevel") or "function").lower()  # NOTE: the host's default level
        table.append(HostRoute(name, template, methods, auth, _compile(template)))
    return table


def answer(table: list[HostRoute], method: str, path: str) -> HostRoute | None:
    """The route that answers `method path` (a path such as `/api/score`), first match wins."""
    for route in table:
        if route.pattern.match(path.rstrip("/") or "/") and method.upper() in route.methods:
            return route
    return None
