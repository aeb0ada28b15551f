"""Checks that hold an OpenAPI document to the app it describes: its routes, and real answers.

`route_problems`: every route the Starlette app serves and every HTTP function of the
Functions app (through the host's first-match table, tests/host_routes.py) is in the document
with its methods, every operation of the document is served by both, and an operation is
anonymous in the document exactly when its function is. `answer_problems`: one real request
and its answer, validated by openapi-core: the operation exists, the status is documented,
and the content-type and body conform. Each returns the problems it found ([] = none), so a
test can break a document on purpose and watch them appear.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

import orjson
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from starlette.routing import BaseRoute, Route

from tests import host_routes

__all__ = ["answer_problems", "operation_of", "operations", "route_problems", "sample_path"]

METHODS = ("get", "put", "post", "delete", "patch", "options", "head")
HOST = "http://127.0.0.1"
# NOTE: a key in the requests validated: the document asks for one (as the Functions host does);
# `make run` and these tests check none.
KEYED = {"x-functions-key": "local"}


def operations(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path template, METHOD, operation) of every operation in the document."""
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method.upper(), item[method]


def sample_path(template: str) -> str:
    """A concrete path of a template (`{name}` → `sample`)."""
    return re.sub(r"\{[^}/]+\}", "sample", template)


def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}/]+\\\}", "[^/]+", re.escape(template)) + "/?$")


def operation_of(doc: Mapping[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]] | None:
    """The document's (template, operation) for a concrete request, literal paths first."""
    found = [(t, op) for t, m, op in operations(doc) if m == method.upper() and _template_regex(t).match(path)]
    found.sort(key=lambda pair: pair[0].count("{"))
    return found[0] if found else None


def route_problems(
    doc: Mapping[str, Any], app_routes: Sequence[BaseRoute], host_table: Sequence[host_routes.HostRoute]
) -> list[str]:
    """What differs between the document's operations and the routes served (Starlette, Functions host)."""
    problems: list[str] = []
    documented = [(t, m, sample_path(t)) for t, m, _ in operations(doc)]
    routes = [r for r in app_routes if isinstance(r, Route)]
    for route in routes:
        for method in sorted((route.methods or set()) - {"HEAD"}):  # NOTE: Starlette adds HEAD to GET
            if not any(m == method and route.path_regex.match(p) for _, m, p in documented):
                problems.append(f"{method} {route.path} is served by the app but not in the document")
    for fn in host_table:
        for method in sorted(fn.methods):
            if not any(m == method and fn.pattern.match(p) for _, m, p in documented):
                problems.append(f"{method} {fn.template} (function {fn.function}) is not in the document")
    default_security = doc.get("security", [])
    for template, method, operation in operations(doc):
        path = sample_path(template)
        if not any(method in (r.methods or ()) and r.path_regex.match(path) for r in routes):
            problems.append(f"{method} {template} is in the document but the app does not serve it")
        answered = host_routes.answer(list(host_table), method, path)
        if answered is None:
            problems.append(f"{method} {template} is in the document but no function answers it under the host")
            continue
        anonymous = operation.get("security", default_security) == []
        if anonymous != (answered.auth_level == "anonymous"):
            problems.append(
                f"{method} {template}: the document says {'no key' if anonymous else 'a function key'}, "
                f"the function {answered.function} is {answered.auth_level}"
            )
    return problems


@cache
def _validator(doc_json: bytes) -> OpenAPI:
    return OpenAPI.from_dict(orjson.loads(doc_json))


def answer_problems(
    doc: Mapping[str, Any],
    method: str,
    path: str,
    status: int,
    content_type: str | None,
    body: bytes,
    *,
    request_body: bytes | None = None,
    request_type: str = "application/json",
) -> list[str]:
    """Whether one real answer (and, for a 2xx, the request that got it) conforms to the document."""
    if operation_of(doc, method, path) is None:
        return [f"{method} {path}: no operation in the document"]
    openapi = _validator(orjson.dumps(doc))
    path = path.rstrip("/") or "/"  # NOTE: the document says it: `path/` is the same route
    request = MockRequest(HOST, method, path, headers=KEYED, data=request_body, content_type=request_type)
    response = MockResponse(body, status, content_type=content_type or "")
    problems = [
        f"{method} {path} -> {status}: {_why(exc)}" for exc in _errors(openapi.validate_response, request, response)
    ]
    if 200 <= status < 300 and request_body is not None:  # NOTE: what the app accepted, the document must accept
        problems += [f"{method} {path} request: {_why(exc)}" for exc in _errors(openapi.validate_request, request)]
    return problems


def _errors(validate: Any, *args: Any) -> list[Exception]:
    try:
        validate(*args)
    except Exception as exc:  # NOTE: openapi-core's own tree; each is a finding, reported whole
        return [exc]
    return []


def _why(exc: BaseException) -> str:
    """openapi-core's error with the schema errors under it (they say which field)."""
    parts = [f"{type(exc).__name__}: {exc}"]
    cause = exc.__cause__
    while cause is not None:
        parts.append(f"{type(cause).__name__}: {cause}")
        parts += [f"  {e.message} at {list(e.absolute_path)}" for e in getattr(cause, "schema_errors", ())]
        cause = cause.__cause__
    return " <- ".join(parts)
