"""The one route table of the HTTP API: every router, allowlist and document derives from it.

    name     the Azure Functions function that declares it (function_app.py; a test holds the two equal)
    path     the same path locally and under the host (host.json's routePrefix is "")
    methods  what it answers; another method is a JSON 405
    auth     the Functions auth level: "function" (any host or function key: what scoring clients
             get), "admin" (the master key only: the control routes, which change what the fleet
             serves or show who changed it) or "anonymous" (the platform's probes)
    plane    "data": scoring work, which takes the core's admission; "admin": everything else

Derived from it: the Starlette routes (shared/adapters/http/app.py, in this order: Starlette
tries them in order, so the hot routes come first), the routes the Functions adapter frames
itself (`framed`), the OpenAPI paths (shared/adapters/http/openapi.py) and the check of
function_app.py's declarations (tests/adapters/test_function_app.py).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

__all__ = ["ROUTES", "Auth", "RouteSpec", "framed", "route"]

Auth = Literal["function", "admin", "anonymous"]


class RouteSpec(NamedTuple):
    name: str
    path: str
    methods: tuple[str, ...]
    auth: Auth
    plane: Literal["data", "admin"]
    summary: str

    @property
    def functions_route(self) -> str:
        """The `route=` of its HTTP trigger (no leading slash)."""
        return self.path.lstrip("/")


def _data(name: str, path: str, summary: str) -> RouteSpec:
    return RouteSpec(name, path, ("POST",), "function", "data", summary)


def _admin(name: str, path: str, summary: str, *methods: str, auth: Auth = "function") -> RouteSpec:
    return RouteSpec(name, path, methods or ("GET",), auth, "admin", summary)


def _control(name: str, path: str, summary: str, *methods: str) -> RouteSpec:
    """A control route: the master key (AuthLevel.ADMIN), never a scoring key (docs/deploy.md)."""
    return _admin(name, path, summary, *methods, auth="admin")


ROUTES: tuple[RouteSpec, ...] = (
    _data("score", "/api/score", "one event, the default model"),
    _data("v2_model_infer", "/v2/models/{name}/infer", "V2 inference"),
    _data("v2_version_infer", "/v2/models/{name}/versions/{version}/infer", "V2 inference, one version"),
    _data("score_batch", "/api/score/batch", "up to MAX_BATCH_ITEMS events, answered in order"),
    _data("model_score", "/api/models/{name}/score", "one event, a named model (or an ensemble)"),
    _admin("models", "/api/models", "loaded models, versions and ensembles"),
    _control(
        "model_activate", "/api/models/{name}/activate", "pin a version everywhere / release it", "POST", "DELETE"
    ),
    _control("model_rollout", "/api/models/{name}/rollout", "what serves a model, its shadow, canary and drift"),
    _control(
        "model_shadow", "/api/models/{name}/shadow", "set a shadow version everywhere / remove it", "PUT", "DELETE"
    ),
    _control(
        "model_canary", "/api/models/{name}/canary", "split users to a candidate / abort the split", "PUT", "DELETE"
    ),
    _control("model_promote", "/api/models/{name}/canary/promote", "the candidate becomes the pinned version", "POST"),
    _control("reviews", "/api/reviews/{event_id}", "an event's review: the reviewer's score, rationale, direction"),
    _admin("stats", "/api/stats", "cache, batch and admission counters"),
    _admin("metrics", "/api/metrics", "every metric, Prometheus text format"),
    _admin("health", "/api/health/{probe}", "live / ready (the platform's probes)", auth="anonymous"),
    _admin("v2_server", "/v2", "V2 server metadata"),
    _admin("v2_health", "/v2/health/{probe}", "V2 live / ready"),
    _admin("v2_model", "/v2/models/{name}", "V2 model metadata"),
    _admin("v2_version", "/v2/models/{name}/versions/{version}", "V2 model metadata, one version"),
    _admin("v2_model_ready", "/v2/models/{name}/ready", "V2 model readiness"),
    _admin("v2_version_ready", "/v2/models/{name}/versions/{version}/ready", "V2 model readiness, one version"),
    _admin("openapi", "/api/openapi.json", "the OpenAPI 3.1 document of every route here"),
)


def route(name: str) -> RouteSpec:
    """The route named `name` (a KeyError names a route the table lacks)."""
    return _BY_NAME[name]


_BY_NAME = {r.name: r for r in ROUTES}


def framed(routes: tuple[RouteSpec, ...] = ROUTES) -> re.Pattern[str]:
    """The URLs, as the Functions host hands them, of the data-plane routes the adapter frames itself.

    A path parameter takes a name without percent-escapes (`[A-Za-z0-9._-]+`); anything else goes
    through the general bridge, which decodes it. Group 1 is the path, group 2 the query.
    """
    paths = [
        re.sub(r"\{[a-z_]+\}", "[A-Za-z0-9._-]+", re.escape(r.path).replace(r"\{", "{").replace(r"\}", "}"))
        for r in routes
        if r.plane == "data"
    ]
    return re.compile(r"\A[a-z]+://[^/]*((?:" + "|".join(paths) + r")/?)(?:\?([^#]*))?\Z")
