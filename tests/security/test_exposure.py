"""Who can reach what without a key.

Under the Functions host a request is answered by the first function, in name order, whose
route matches (tests/host_routes.py); that function's auth level decides whether a key is
needed. Only the Container Apps probes may go without one. The check below sends every
route template of the app, filled with hostile values and bent every way a client can bend
a path (case, trailing and doubled slashes, extra segments, `..`, percent-encoded dots and
slashes, bytes that are not UTF-8), through the host's table as the host may see it (decoded,
with and without its dot-segment removal), and every request that lands on an anonymous
function through the real Functions adapter: it must answer from a probe, or refuse.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest

from shared.adapters.functions import FunctionHandlers
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests import host_routes
from tests.adapters.test_function_app import FUNCTIONS  # NOTE: indexed once per process, as the worker does

REPO = Path(__file__).resolve().parents[2]
PREFIX = json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"]
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
PROBES = frozenset({"health"})  # the one function without a key: Container Apps' liveness and readiness probes
PROBE_PATHS = ("/api/health/live", "/api/health/ready")

# Values an attacker puts where a template has a parameter.
HOSTILE = ("..", "%2e%2e", ".%2E", "live%2F..%2F..%2Fapi%2Fstats", "LIVE", "live;x=1", "%ff", "%00", "a\\..\\stats")
FILL = {"probe": ("live", "ready", "stats", *HOSTILE), "name": ("fraud", *HOSTILE), "version": ("1", "..")}
ODD_PATHS = (
    "/", "/api", "/api/", "/v2/", "/api/health", "/api/health/", "/api/health/live/x", "/api/health/ready/..",
    "/%61pi/stats", "/api/%73tats", "/api/health/liv%65", "/api/health/%6c%69%76%65", "/api/health/..;/..;/stats",
    "/api/health/.%2e/.%2e/stats", "/api/health/%2e%2e%2f%2e%2e%2fstats", "/api/health/live/../../stats",
    "/api/health/live/..%2F..%2Fstats", "/API/HEALTH/LIVE", "/Api/Health/Ready/", "/v2/../api/stats",
    "/api/score/../stats", "/api/models/fraud/score/../../../stats", "//api/stats", "/api//stats", "/api/stats%2F",
)  # fmt: skip


# -- the paths ----------------------------------------------------------------------------------------


def filled(template: str) -> Iterator[str]:
    """Every way of filling `template`'s parameters with FILL's values (others get `x`)."""
    names = re.findall(r"\{\*?(\w+)[^}]*\}", template)
    for values in itertools.product(*(FILL.get(n, ("x", *HOSTILE[:3])) for n in names)):
        path = template
        for value in values:
            path = re.sub(r"\{[^}]+\}", lambda _, v=value: v, path, count=1)
        yield "/" + path


def bent(path: str) -> Iterator[str]:
    """`path` and the ways a client bends it."""
    yield from (path, path + "/", path.upper(), path.replace("/", "//"), path + "/extra", path + "/..")
    yield from (path + "/../../stats", path + "%2F..%2F..%2Fapi%2Fstats", "/api/health/live/../.." + path)
    yield "/api/health/live%2F..%2F.." + path.replace("/", "%2F")


def attacks(table: list[host_routes.HostRoute]) -> list[tuple[str, str]]:
    """(method, path as sent) for every template, filled and bent, and the odd paths; every method."""
    paths = sorted({*ODD_PATHS, *(b for r in table for p in filled(r.template) for b in bent(p))})
    return [(m, p) for p in paths for m in METHODS]


def host_views(path: str) -> set[str]:
    """The path as the host's router may see it: percent-escapes decoded except `%2F` (ASCII
    ones: a decoded non-ASCII byte never changes which template matches), with and without
    the removal of dot segments (we do not rely on either)."""
    decoded = re.sub(r"%(?![2][fF])([0-7][0-9A-Fa-f])", lambda m: chr(int(m[1], 16)), path)
    return {decoded, _without_dots(decoded)}


def _without_dots(path: str) -> str:
    out: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return "/" + "/".join(out)


# -- the check ----------------------------------------------------------------------------------------

Worker = Callable[[str, str], Awaitable[func.HttpResponse]]


async def keyless_findings(metadata: Mapping[str, Mapping[str, Any]], worker: Worker) -> tuple[list[str], int]:
    """What the function metadata lets in without a key, other than the probes (and how many
    requests were tried): every HTTP function's auth level, then every hostile request that the
    host's table hands an anonymous function, answered by `worker` (the Functions adapter)."""
    table = host_routes.route_table_of(metadata, PREFIX)
    findings = [
        f"{r.function} ({r.template}) is {r.auth_level}"
        for r in table
        if (r.auth_level == "anonymous") != (r.function in PROBES)  # NOTE: "function" or "admin": keyed
    ]
    tried, answered = 0, {}
    for method, path in attacks(table):
        for seen in sorted(host_views(path)):
            tried += 1
            route = host_routes.answer(table, method, seen)
            if route is None or route.auth_level != "anonymous":
                continue
            for url in {path, _without_dots(seen)}:  # the URL the worker is handed, as sent or normalised
                if (method, url) not in answered:
                    answered[method, url] = await worker(method, url)
                reply = answered[method, url]
                if not _probe_or_refusal(reply):
                    findings.append(f"{method} {path} -> {route.function} (anonymous) -> {reply.status_code} {url}")
    return findings, tried


def _probe_or_refusal(reply: func.HttpResponse) -> bool:
    """A probe's answer, or a refusal that ran nothing: anything else is a route answering unkeyed."""
    try:
        body = json.loads(reply.get_body())
    except ValueError:
        return False  # not JSON: /api/metrics, say
    if reply.status_code in (400, 404, 405):
        return body.get("error") in ("not_found", "method_not_allowed", "bad_request")
    if body == {"status": "live"}:
        return reply.status_code == 200
    return body.get("status") in ("ready", "not_ready") and set(body) <= {"status", "detail", "models", "degraded"}


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[Worker]:
    """The Functions adapter every HTTP function forwards to (`handlers.http`), over the test model."""
    handlers = FunctionHandlers(ServiceHolder(lambda: settings))

    async def call(method: str, path: str) -> func.HttpResponse:
        headers = {"content-type": "application/json"}
        request = func.HttpRequest(method=method, url=f"http://localhost{path}", headers=headers, body=b"{}")
        return await handlers.http(request)

    yield call
    await handlers.aclose()


def metadata() -> dict[str, dict[str, Any]]:
    """A deep copy of what the worker hands the host: a test may break it."""
    return copy.deepcopy(host_routes.function_metadata(FUNCTIONS.values()))


def test_every_http_function_is_keyed_but_the_probes() -> None:
    levels = {r.function: r.auth_level for r in host_routes.route_table_of(metadata(), PREFIX)}
    assert levels.pop("health") == "anonymous"
    assert set(levels.values()) == {"function", "admin"}, levels  # admin: the master key, the control routes
    http = [name for name, meta in metadata().items() if any(b["type"] == "httpTrigger" for b in meta["bindings"])]
    assert sorted(levels) == sorted(n for n in http if n != "health")  # every HTTP function is in the table


async def test_no_hostile_path_reaches_an_unkeyed_route_but_the_probes(worker: Worker) -> None:
    findings, tried = await keyless_findings(metadata(), worker)
    assert findings == []
    assert tried > 10_000  # the whole table, bent every way, every method
    live, ready = [await worker("GET", path) for path in PROBE_PATHS]  # the probes answer without a key
    assert live.status_code == 200 and ready.status_code in (200, 503) and _probe_or_refusal(ready)


@pytest.mark.parametrize("function", ["stats", "model_activate", "v2_model_infer"])
async def test_the_check_catches_one_function_flipped_to_anonymous(worker: Worker, function: str) -> None:
    """Mutation: the same metadata with one function's authLevel set to ANONYMOUS."""
    broken = metadata()
    trigger = next(b for b in broken[function]["bindings"] if b["type"] == "httpTrigger")
    trigger["authLevel"] = "ANONYMOUS"
    findings, _ = await keyless_findings(broken, worker)
    assert findings and findings[0].startswith(f"{function} (")  # the level itself
    assert any(f"-> {function} (anonymous) -> 2" in f or f"-> {function} (anonymous) -> 4" in f for f in findings)


async def test_the_check_catches_an_anonymous_catch_all_named_before_the_rest(worker: Worker) -> None:
    """Mutation: a keyless `api/{*rest}` function whose name sorts first answers every api/ path."""
    broken = metadata()
    broken["api"] = {
        "bindings": [
            {"direction": "IN", "type": "httpTrigger", "name": "req", "authLevel": "ANONYMOUS", "route": "api/{*rest}"}
        ]
    }
    findings, _ = await keyless_findings(broken, worker)
    assert any(f.startswith("GET /api/stats -> api (anonymous) -> 200") for f in findings), findings[:5]


def test_the_host_views_decode_and_remove_dot_segments() -> None:
    assert host_views("/api/health/%2e%2e/stats") == {"/api/health/../stats", "/api/stats"}
    assert host_views("/api/health/live%2F..%2Fstats") == {"/api/health/live%2F..%2Fstats"}  # %2F stays encoded
    assert host_views("/api/health/%ff") == {"/api/health/%ff"}


async def test_an_undecodable_path_is_a_json_400_not_a_failed_invocation(worker: Worker) -> None:
    """AsgiMiddleware decodes the path as UTF-8; `%ff` used to raise there, and the host answers 500."""
    reply = await worker("GET", "/api/health/%ff")
    assert reply.status_code == 400 and json.loads(reply.get_body())["error"] == "bad_request"
